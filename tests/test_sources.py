"""Source adapters on small hand-written fixtures (tests/data/sources): field mapping per platform, problems with
their locations (detection, the registry and less common shapes: test_sources_detection.py)."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

from echo_builder.records import MediaRef, Post
from echo_builder.sources import (
    detect_format,
    read_posts,
)

DATA = Path(__file__).parent / "data" / "sources"
COLLECTION = DATA / "collection" / "mini-prompts"
UTC = timezone.utc


def _by_id(report) -> dict[str, Post]:
    return {p.id: p for p in report.posts}


def _problems(report) -> list[tuple[str | None, str]]:
    return [(p.location, p.level) for p in report.problems]


# ------------------------------------------------------------------------------------------------ x_api


def test_x_api_page_maps_tweets_includes_and_reports_bad_records():
    report = read_posts(DATA / "x_api_page.json")
    assert [p.id for p in report.posts] == [
        "x:1900000000000000001",
        "x:1900000000000000002",
        "x:1900000000000000003",
        "x:1899999999999999999",  # from includes.tweets: referenced tweets are posts too
    ]
    root, reply, quote, included = report.posts
    assert root.text == "Made this with the new image model & I love it: prompt below 👇 https://t.co/abc"
    assert root.url == "https://x.com/artist_one/status/1900000000000000001"
    assert (root.author_id, root.author, root.lang) == ("501", "artist_one", "en")
    assert root.created_at == datetime(2025, 3, 26, 18, 2, 11, tzinfo=UTC)
    assert (root.reply_to_id, root.root_id, root.quoted_id) == (None, "x:1900000000000000001", None)
    assert root.engagement == {
        "likes": 120,
        "reposts": 7,
        "replies": 3,
        "quotes": 1,
        "views": 4500,
        "bookmarks": 9,
    }
    assert root.media == (
        MediaRef(
            url="https://pbs.twimg.com/media/AAA111.jpg",
            media_id="3_1900000000000000101",
            type="photo",
            alt_text="a cat in ghibli style",
            width=1024,
            height=1536,
        ),
        MediaRef(
            url="https://pbs.twimg.com/media/AAA112.jpg",
            media_id="3_1900000000000000102",
            type="photo",
            width=1024,
            height=1024,
        ),
    )
    assert root.raw["edit_history_tweet_ids"] == ["1900000000000000001"]
    # a long post: note_tweet.text is the full text and is preferred over the truncated, escaped `text`
    assert reply.text.startswith(
        "Prompt: a studio-ghibli style portrait of my cat, soft light, <no text>. Long"
    )
    assert reply.reply_to_id == "x:1900000000000000001"
    assert quote.quoted_id == "x:1900000000000000001" and quote.reply_to_id is None
    assert quote.url == "https://x.com/critic_two/status/1900000000000000003"
    # the author of an included tweet is not in includes.users: no username, so the /i/ URL
    assert included.url == "https://x.com/i/status/1899999999999999999" and included.author is None
    assert included.media == (MediaRef(media_id="7_1899999999999999990", type="image"),)

    assert _problems(report) == [
        ("data[3]", "error"),
        ("data[4]", "note"),
        ("data[5]", "error"),
        ("errors[0]", "note"),
    ]
    missing_id, retweet, bad_date, api_error = report.problems
    assert "missing tweet id" in missing_id.reason
    assert "retweet of x:1900000000000000001" in retweet.reason
    assert "'yesterday'" in bad_date.reason
    assert "Could not find tweet" in api_error.reason
    assert all(p.file == str(DATA / "x_api_page.json") for p in report.problems)


def test_x_api_jsonl_pages_keep_good_lines_and_report_the_truncated_one():
    report = read_posts(DATA / "x_api_pages.jsonl")
    assert [p.id for p in report.posts] == ["x:1910000000000000001", "x:1910000000000000003"]
    video = report.posts[0].media[0]
    assert video.type == "video"
    assert video.url == "https://pbs.twimg.com/ext_tw_video_thumb/1910000000000000111/pu/img/x.jpg"
    assert (video.width, video.height) == (720, 1280)
    assert report.posts[1].reply_to_id == "x:1900000000000000000"
    assert [(p.location, p.level) for p in report.problems] == [("line 2", "error")]
    assert "not valid JSON" in report.problems[0].reason


# ------------------------------------------------------------------------------------------------ x_graphql


def test_x_graphql_conversation_walks_entries_modules_and_quotes():
    report = read_posts(DATA / "x_graphql_detail.json")
    assert [p.id for p in report.posts] == [
        "x:1920000000000000001",
        "x:1920000000000000002",
        "x:1920000000000000003",
        "x:1910000000000000009",  # the quoted tweet, right after the tweet quoting it
        "x:1920000000000000006",
        "x:1920000000000000007",
    ]
    posts = _by_id(report)
    root = posts["x:1920000000000000001"]
    # note_tweet holds the full text of the long post, unescaped by X (legacy.full_text is cut and escaped)
    assert root.text == (
        "Turn any photo into a vintage travel poster & keep the faces. Full prompt:\n\n"
        '"Vintage 1950s travel poster of [CITY], bold flat colours, big title text"\n\n'
        "works every time with the new model"
    )
    assert root.created_at == datetime(2025, 4, 26, 9, 15, tzinfo=UTC)
    assert root.engagement == {
        "likes": 900,
        "reposts": 80,
        "replies": 3,
        "quotes": 1,
        "bookmarks": 300,
        "views": 15000,
    }
    # extended_entities has both photos (entities.media only the first)
    assert [(m.media_id, m.url, m.alt_text, m.width, m.height) for m in root.media] == [
        ("3_1920000000000000101", "https://pbs.twimg.com/media/P1a.jpg", "poster of Rome", 1024, 1536),
        ("3_1920000000000000102", "https://pbs.twimg.com/media/P1b.jpg", None, 1536, 1024),
    ]
    wrapped = posts["x:1920000000000000002"]  # inside TweetWithVisibilityResults, user in legacy.screen_name
    assert wrapped.author == "curious_cat" and wrapped.author_id == "802"
    assert (
        wrapped.text == "@prompt_poet tried it, the colours shifted yellow 😅 but the title text is perfect"
    )
    assert wrapped.reply_to_id == "x:1920000000000000001"
    assert {p.root_id for p in report.posts if p.id.startswith("x:192")} == {"x:1920000000000000001"}
    quoting = posts["x:1920000000000000003"]
    assert quoting.quoted_id == "x:1910000000000000009" and quoting.reply_to_id == "x:1920000000000000002"
    assert "quoted_status_result" not in quoting.raw  # the quoted tweet is its own post
    quoted = posts["x:1910000000000000009"]
    assert quoted.text == "مرحبا بالعالم — poster test שלום" and quoted.lang == "ar"
    assert quoted.media[0].type == "animated_gif"
    no_user = posts["x:1920000000000000007"]
    assert (no_user.author_id, no_user.author) == ("806", None)
    assert no_user.url == "https://x.com/i/status/1920000000000000007"

    prefix = "data.threaded_conversation_with_injections_v2.instructions[1].entries[2].content.items"
    assert [(p.location, p.level) for p in report.problems] == [
        (f"{prefix}[0].item.itemContent.tweet_results.result", "note"),  # tombstone
        (f"{prefix}[1].item.itemContent.tweet_results.result", "error"),  # unparseable date
        ("x:1920000000000000006", "note"),  # replies to itself
        (f"{prefix}[3].item.itemContent.tweet_results.result.quotedRefResult.result", "note"),  # stub only
    ]
    assert "deleted by the Post author" in report.problems[0].reason
    assert "Someday in April" in report.problems[1].reason


def test_x_graphql_self_reply_is_kept_as_given_with_a_note():
    report = read_posts(DATA / "x_graphql_detail.json")
    looped = _by_id(report)["x:1920000000000000006"]
    assert looped.reply_to_id == looped.id
    note = next(p for p in report.problems if p.location == looped.id)
    assert note.level == "note" and "replies to itself" in note.reason


# ------------------------------------------------------------------------------------------------ reddit


def test_reddit_dump_submissions_comments_and_media():
    report = read_posts(DATA / "reddit_dump.ndjson")
    assert [p.id for p in report.posts] == [
        "reddit:t3_1abc01",
        "reddit:t3_1abc02",
        "reddit:t1_kc01",
        "reddit:t1_kc02",
        "reddit:t1_kc03",
        "reddit:t1_kc05",
    ]
    posts = _by_id(report)
    gallery = posts["reddit:t3_1abc01"]
    assert gallery.text == (
        "New model turned my sketch into this & I'm amazed\n\n"
        'Prompt: "turn this pencil sketch into a watercolor, keep the composition"\n\n'
        "> it even kept the signature"
    )
    assert (
        gallery.url == "https://www.reddit.com/r/aiArt/comments/1abc01/new_model_turned_my_sketch_into_this/"
    )
    assert (gallery.author, gallery.author_id) == ("sketchy_sam", "t2_sam01")
    assert gallery.created_at == datetime.fromtimestamp(1743000000, UTC)
    assert (gallery.reply_to_id, gallery.root_id) == (None, "reddit:t3_1abc01")
    assert gallery.engagement == {"score": 512, "replies": 3, "crossposts": 1}
    # gallery_data order (sk01 then wc02), not media_metadata order; &amp; unescaped in URLs
    assert gallery.media == (
        MediaRef(
            url="https://preview.redd.it/sk01.jpg?width=800&format=pjpg&s=a1",
            media_id="sk01",
            type="photo",
            alt_text="the sketch",
            width=800,
            height=600,
        ),
        MediaRef(
            url="https://preview.redd.it/wc02.png?width=1024&format=png&auto=webp&s=b2",
            media_id="wc02",
            type="photo",
            width=1024,
            height=1024,
        ),
    )
    image_post = posts["reddit:t3_1abc02"]
    assert image_post.text == "Ghibli me 🙃"  # empty selftext: the title alone
    assert image_post.created_at == datetime.fromtimestamp(1743003600, UTC)  # created_utc sent as a string
    assert image_post.media == (
        MediaRef(url="https://i.redd.it/gh02.jpeg", type="photo", width=1179, height=2556),
    )
    top = posts["reddit:t1_kc01"]
    assert top.text == "Which model? The colours look <very> warm"
    assert (top.reply_to_id, top.root_id) == ("reddit:t3_1abc01", "reddit:t3_1abc01")
    assert top.url == "https://www.reddit.com/r/aiArt/comments/1abc01/_/kc01/"
    nested = posts["reddit:t1_kc02"]
    assert (nested.reply_to_id, nested.root_id) == ("reddit:t1_kc01", "reddit:t3_1abc01")
    assert nested.url.endswith("/new_model_turned_my_sketch_into_this/kc02/")
    assert nested.created_at == datetime(2025, 3, 26, 15, 5, 0, 500000, tzinfo=UTC)
    deleted = posts["reddit:t1_kc03"]
    assert (deleted.text, deleted.author, deleted.author_id) == ("[removed]", "[deleted]", None)
    assert deleted.engagement == {} and deleted.raw["score"] == -4  # negative score: raw only

    assert [(p.location, p.level) for p in report.problems] == [
        ("line 6", "error"),
        ("line 8", "error"),
        ("reddit:t1_kc05", "note"),
    ]
    assert "not valid JSON" in report.problems[0].reason
    assert "has no body" in report.problems[1].reason


def test_reddit_api_listing_with_nested_replies(tmp_path):
    listing = [
        {
            "kind": "Listing",
            "data": {
                "children": [
                    {
                        "kind": "t3",
                        "data": {
                            "id": "zz1",
                            "name": "t3_zz1",
                            "subreddit": "aiArt",
                            "title": "t",
                            "selftext": "",
                            "author": "a",
                            "created_utc": 1.7e9,
                            "permalink": "/r/aiArt/comments/zz1/t/",
                        },
                    }
                ]
            },
        },
        {
            "kind": "Listing",
            "data": {
                "children": [
                    {
                        "kind": "t1",
                        "data": {
                            "id": "c1",
                            "name": "t1_c1",
                            "link_id": "t3_zz1",
                            "parent_id": "t3_zz1",
                            "body": "top",
                            "author": "b",
                            "subreddit": "aiArt",
                            "created_utc": 1.7e9 + 60,
                            "replies": {
                                "kind": "Listing",
                                "data": {
                                    "children": [
                                        {
                                            "kind": "t1",
                                            "data": {
                                                "id": "c2",
                                                "link_id": "t3_zz1",
                                                "parent_id": "t1_c1",
                                                "body": "nested",
                                                "author": "a",
                                                "subreddit": "aiArt",
                                                "created_utc": 1.7e9 + 120,
                                                "replies": "",
                                            },
                                        },
                                        {"kind": "more", "data": {"children": ["c3", "c4"]}},
                                    ]
                                },
                            },
                        },
                    }
                ]
            },
        },
    ]
    path = tmp_path / "thread.json"
    path.write_text(json.dumps(listing), encoding="utf-8")
    assert detect_format(path) == "reddit"
    report = read_posts(path)
    assert [(p.id, p.reply_to_id) for p in report.posts] == [
        ("reddit:t3_zz1", None),
        ("reddit:t1_c1", "reddit:t3_zz1"),
        ("reddit:t1_c2", "reddit:t1_c1"),
    ]
    assert "replies" not in report.posts[1].raw
    assert [(p.level, "2 more comments" in p.reason) for p in report.problems] == [("note", True)]


# ------------------------------------------------------------------------------------------------ bluesky


def test_bluesky_thread_ancestors_focal_quote_and_replies():
    report = read_posts(DATA / "bluesky_thread.json")
    focal_uri = "at://did:plc:focal111/app.bsky.feed.post/3lfocal0001"
    root_uri = "at://did:plc:gone000/app.bsky.feed.post/3lroot00001"
    assert [p.id for p in report.posts] == [
        "bluesky:at://did:plc:parent22/app.bsky.feed.post/3lparent001",
        f"bluesky:{focal_uri}",
        "bluesky:at://did:plc:quoted33/app.bsky.feed.post/3lquoted001",
        "bluesky:at://did:plc:reply444/app.bsky.feed.post/3lreply0001",
        "bluesky:at://did:plc:focal111/app.bsky.feed.post/3lselfrep01",
    ]
    parent, focal, quoted, reply, self_reply = report.posts
    assert parent.created_at == datetime(2025, 3, 27, 8, 0, tzinfo=UTC)  # +02:00 converted to UTC
    assert parent.reply_to_id == parent.root_id == f"bluesky:{root_uri}"  # the deleted root
    assert focal.url == "https://bsky.app/profile/maker.bsky.social/post/3lfocal0001"
    assert (focal.author_id, focal.author, focal.lang) == ("did:plc:focal111", "maker.bsky.social", "en")
    assert focal.reply_to_id == parent.id and focal.root_id == f"bluesky:{root_uri}"
    assert focal.quoted_id == quoted.id
    assert focal.engagement == {"likes": 20, "reposts": 1, "replies": 2, "quotes": 0}
    assert focal.media == (
        MediaRef(
            url="https://cdn.bsky.app/img/feed_fullsize/plain/did:plc:focal111/bafkimg1@jpeg",
            type="photo",
            alt_text="a watercolor fox",
            width=1024,
            height=768,
        ),
    )
    # the quoted post (recordWithMedia): handle.invalid -> no author handle, URL through the DID
    assert quoted.text == "Prompt: a watercolor fox in the snow, muted palette"
    assert quoted.author is None and quoted.author_id == "did:plc:quoted33"
    assert quoted.url == "https://bsky.app/profile/did:plc:quoted33/post/3lquoted001"
    assert quoted.root_id == quoted.id and quoted.reply_to_id is None
    assert quoted.media[0].alt_text is None  # empty alt
    assert reply.text == "جميل جدا! 👏🏽 יפה מאוד" and reply.lang == "ar"
    assert reply.reply_to_id == focal.id
    assert self_reply.media == (
        MediaRef(
            url="https://video.bsky.app/watch/did%3Aplc%3Afocal111/bafkvideo1/thumbnail.jpg",
            media_id="bafkvideo1",
            type="video",
            alt_text="timelapse",
            width=1080,
            height=1920,
        ),
    )
    assert [(p.location, p.level) for p in report.problems] == [
        ("thread.parent.parent", "note"),  # notFoundPost
        ("thread.replies[1]", "note"),  # blockedPost
        ("thread.replies[2].post", "error"),  # not an at:// URI
    ]
    assert "not found" in report.problems[0].reason and "blocked" in report.problems[1].reason


# ------------------------------------------------------------------------------------------------ collection


def test_collection_cases_numeric_order_text_media_and_raw():
    report = read_posts(COLLECTION)
    assert [p.id for p in report.posts] == [
        "collection:mini-prompts/1",
        "collection:mini-prompts/2",
        "collection:mini-prompts/10",
    ]
    menu, figurine, template = report.posts
    assert menu.platform == "collection" and menu.root_id == menu.id
    assert menu.text == (
        'A chalkboard menu for a coffee shop called "Bean There", listing Espresso $3, Latte $4.50 and '
        "Matcha $5, hand-lettered, warm light."
    )
    assert menu.url == "https://x.com/menu_maker/status/1930000000000000001"
    assert menu.author == "@menu_maker" and menu.author_id is None and menu.created_at is None
    image = COLLECTION / "cases" / "1" / "example_menu.png"
    assert menu.media == (MediaRef(path=str(image.resolve()), type="image", alt_text="咖啡店菜单"),)
    assert Path(menu.media[0].path).is_file()
    assert menu.raw["needs_input_image"] is False
    assert menu.raw["title_en"] == "Coffee Shop Menu Board"
    assert menu.raw["source_urls"] == [
        "https://x.com/menu_maker/status/1930000000000000001",
        "https://x.com/menu_maker/status/1930000000000000002",
    ]
    assert menu.raw["example_images"] == ["cases/1/example_menu.png"]
    assert menu.raw["attribution"]["date"] == "2025-05-01"  # a YAML date, stored as ISO text
    assert (menu.raw["collection"], menu.raw["case"], menu.raw["case_dir"]) == (
        "mini-prompts",
        "1",
        "cases/1",
    )
    # original language, inner line break kept, the block scalar's final newline dropped
    assert figurine.text == (
        "把照片中的人物变成一个放在桌上的收藏级手办，旁边有包装盒，盒子上印着人物的图片。\n保持人物的脸部特征不变。"
    )
    assert figurine.raw["needs_input_image"] is True
    assert figurine.raw["prompt_en"].startswith("Turn the person in the photo into a collectible figurine")
    assert figurine.raw["reference_note_en"] == "Upload a photo of a person.\n"
    assert figurine.media == ()  # the named example image is not in the folder
    assert (
        template.text
        == 'A minimalist poster for [Brand Logo] with the slogan "{Slogan}" in bold sans-serif 🚀'
    )
    assert template.url == "https://x.com/template_tess/status/1930000000000000100"  # plain string link
    assert template.raw["needs_input_image"] is True  # only reference_note_en is filled
    assert [(p.location, p.level) for p in report.problems] == [("cases/3", "error"), ("cases/4", "error")]
    assert "not valid YAML" in report.problems[0].reason and "line 4" in report.problems[0].reason
    assert "no prompt" in report.problems[1].reason


def test_collection_image_outside_the_case_folder_is_ignored(tmp_path):
    case = tmp_path / "coll" / "cases" / "1"
    case.mkdir(parents=True)
    (tmp_path / "secret.png").write_bytes(b"not really")
    (case / "case.yml").write_text("prompt: hi\nimage: ../../../secret.png\n", encoding="utf-8")
    report = read_posts(tmp_path / "coll")
    assert report.posts[0].media == ()
    assert [(p.location, p.level) for p in report.problems] == [("cases/1", "note")]
    assert "outside the case folder" in report.problems[0].reason


def test_keep_raw_false_drops_raw_except_for_collection_fields():
    report = read_posts([DATA / "x_api_page.json", COLLECTION], keep_raw=False)
    assert all(p.raw is None for p in report.posts if p.platform == "x")
    assert all(
        p.raw["needs_input_image"] in (True, False) for p in report.posts if p.platform == "collection"
    )


# ------------------------------------------------------------------------------------------------ jsonl


def test_jsonl_of_posts_reads_valid_lines_and_reports_the_invalid_one():
    report = read_posts(DATA / "posts.jsonl")
    assert [p.id for p in report.posts] == [
        "x:1",
        "reddit:t1_b",
        "bluesky:at://did:plc:abc/app.bsky.feed.post/3k",
    ]
    assert report.posts[0].text == "hello 👋 مرحبا"
    assert report.posts[2].created_at == datetime(2025, 1, 2, 1, 4, 5, tzinfo=UTC)
    assert [(p.location, p.level) for p in report.problems] == [("line 4", "error")]  # blank line 2 skipped
    assert "colour" in report.problems[0].reason
