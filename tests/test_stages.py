"""Curation stages on posts built in the test: query, relevance, threads, extract (rules and scripted LLM)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from echo_builder.backends import create_backend
from echo_builder.backends.caller import ModelCaller, RetryPolicy
from echo_builder.cache import CallCache
from echo_builder.errors import ConfigError
from echo_builder.records import MediaRef, Post
from echo_builder.stages.extract import find_placeholders, render_tree, rules_extract, run_extract
from echo_builder.stages.query import Keyword, load_keywords, run_query
from echo_builder.stages.relevance import rules_relevance, run_relevance
from echo_builder.stages.threads import build_trees, canonical_url

LAUNCH = datetime(2025, 3, 25, tzinfo=timezone.utc)
IMG = (MediaRef(url="https://pbs.twimg.com/media/a.jpg", type="photo"),)


def post(n, text="", *, parent=None, author="alice", days=1, media=(), url=True, platform="x"):
    return Post(
        id=f"{platform}:{n}",
        platform=platform,
        text=text,
        author_id=author,
        author=author,
        url=f"https://x.com/{author}/status/{n}" if url else None,
        reply_to_id=f"{platform}:{parent}" if parent else None,
        created_at=LAUNCH + timedelta(days=days, minutes=n),
        media=media,
    )


# -- query --------------------------------------------------------------------------------------------------------------
def test_query_word_boundaries_case_and_windows():
    posts = [
        post(1, "Trying GPT-4o's new image gen!"),
        post(2, "gpt-4omni is not a thing"),
        post(3, "OpenAI did it again", days=3),
        post(4, "openai news", days=30),
        post(5, "OPENAI and gpt-4o together", days=30),
        post(6, "nothing here"),
    ]
    keywords = [Keyword("gpt-4o"), Keyword("openai", window_days=14)]
    result = run_query(posts, keywords, launch_date="2025-03-25")
    assert [p.id for p in result.kept] == ["x:1", "x:3", "x:5"]
    assert result.matches == {"x:1": ("gpt-4o",), "x:3": ("openai",), "x:5": ("gpt-4o",)}
    assert result.yield_per_keyword == {
        "gpt-4o": {"matched": 2, "only": 2},
        "openai": {"matched": 1, "only": 1},
    }
    assert result.outside_window == 2  # posts 4 and 5 said "openai" 30 days after launch
    with pytest.raises(ConfigError, match="launch date"):
        run_query(posts, keywords)


def test_keyword_files(tmp_path):
    text = tmp_path / "k.txt"
    text.write_text("# terms\ngpt-4o\nopenai\t14\nimage gen | 7\n")
    assert load_keywords(text) == [Keyword("gpt-4o"), Keyword("openai", 14), Keyword("image gen", 7)]
    js = tmp_path / "k.json"
    js.write_text(json.dumps({"keywords": ["sora", {"term": "openai", "window_days": 14, "before_days": 2}]}))
    assert load_keywords(js) == [Keyword("sora"), Keyword("openai", 14, 2)]
    bad = tmp_path / "bad.txt"
    bad.write_text("openai\tsoon\n")
    with pytest.raises(ConfigError, match=r"bad\.txt:1"):
        load_keywords(bad)


KEYS = "the keys 'term' (required), 'window_days', 'before_days'"


@pytest.mark.parametrize(
    "entry, message",
    [
        # a wrong entry is named by its kind and keys, never by its values (a file that is no keyword list)
        (5, f"keyword 1 must be a term or an object with {KEYS}; got a number"),
        (
            {"window_days": 3},
            f"keyword 1 must be a term or an object with {KEYS}; got an object with the keys 'window_days'",
        ),
        (
            {"password": "hunter2"},
            f"keyword 1 must be a term or an object with {KEYS}; got an object with the keys 'password'",
        ),
        # a misspelt key used to be ignored: the keyword then matched at any time
        (
            {"term": "openai", "windows_days": 14},
            f"keyword 1: unknown key 'windows_days'; {KEYS.replace('the keys', 'the keys are')}",
        ),
    ],
)
def test_a_malformed_json_keyword_names_every_accepted_key(tmp_path, entry, message):
    path = tmp_path / "k.json"
    path.write_text(json.dumps(["sora", entry]))
    with pytest.raises(ConfigError) as caught:
        load_keywords(path)
    assert str(caught.value) == f"{path}: {message}"


# -- relevance ----------------------------------------------------------------------------------------------------------
def test_rules_relevance_keeps_image_generation_and_drops_api_news():
    assert (
        rules_relevance(
            post(1, "GPT-4o made this Ghibli portrait! Prompt: a cat in Ghibli style", media=IMG), "GPT-4o"
        ).score
        == 5
    )
    assert (
        rules_relevance(
            post(2, "Today we are deprecating our Premium v1.1 API and pricing tiers"), "GPT-4o"
        ).score
        <= 2
    )
    assert rules_relevance(post(3, "What a day"), "GPT-4o").score == 1


def _caller(server, tmp_path, **kw):
    backend = create_backend("openai:curator", base_url=server.base_url)
    return ModelCaller(
        backend,
        cache=CallCache(tmp_path / "cache"),
        retry=RetryPolicy(max_attempts=2, initial_backoff_s=0.001),
        **kw,
    )


def test_relevance_with_a_scripted_llm(openai_server, tmp_path):
    def reply(body):
        text = body["messages"][1]["content"]
        if "valid" in text:
            return '{"score": 5, "note": "uses the model"}'
        if "fenced" in text:
            return '```json\n{"score": 4,}\n```'
        if "range" in text:
            return '{"score": 9}' if len(body["messages"]) == 2 else '{"score": 2}'
        if "label" in text:
            return '{"score": "very relevant"}'
        return "I think this is relevant."

    openai_server.reply = reply
    posts = [
        post(i, t) for i, t in enumerate(["valid", "fenced", "out of range", "unknown label", "prose"], 1)
    ]
    result = run_relevance(posts, target_model="GPT-4o", caller=_caller(openai_server, tmp_path))
    assert [(s.post_id, s.score, s.status, s.kept) for s in result.scores] == [
        ("x:1", 5, "ok", True),
        ("x:2", 4, "ok", True),
        ("x:3", 2, "ok", False),
        ("x:4", None, "parse_failure", False),
        ("x:5", None, "parse_failure", False),
    ]
    assert [p.id for p in result.kept] == ["x:1", "x:2"]
    assert {f.record_id for f in result.failures} == {"x:4", "x:5"}
    assert result.failures[0].raw_text == '{"score": "very relevant"}'


# -- threads ------------------------------------------------------------------------------------------------------------
def test_tree_with_self_thread_replies_missing_parent_and_duplicates():
    root = post(1, "Prompt below 👇", media=IMG)
    self1 = post(2, "Prompt: a cat astronaut", parent=1)
    self2 = post(3, "and a second try", parent=2, media=IMG)
    reply = post(4, "wow amazing", parent=1, author="bob")
    deep = post(5, "agreed", parent=4, author="carol")
    orphan = post(7, "replying to a deleted post", parent=6, author="dave")
    dup = post(2, "Prompt: a cat astronaut", parent=1)  # the same post from another export
    alias = Post(
        id="x:99",
        platform="x",
        text="same status via twitter.com",
        url="https://twitter.com/alice/status/4?s=20",
        reply_to_id="x:1",
    )
    child_of_alias = post(8, "child of the alias", parent=99, author="erin")
    result = build_trees(
        [self1, orphan], [root, self1, self2, reply, deep, orphan, dup, alias, child_of_alias]
    )
    assert len(result.trees) == 2
    tree = result.trees[0]
    assert tree.root_id == "x:1" and tree.seed_ids == ("x:2",)
    assert [p.id for p in tree.posts] == ["x:1", "x:2", "x:3", "x:4", "x:5", "x:8"]
    assert tree.children == {
        "x:1": ("x:2", "x:4"),
        "x:2": ("x:3",),
        "x:4": ("x:5", "x:8"),
    }  # alias merged into 4
    orphan_tree = result.trees[1]
    assert orphan_tree.root_id == "x:7" and orphan_tree.missing_ids == ("x:6",)
    assert result.duplicates_merged == 1 and result.missing_parents == 1


def test_cycles_self_replies_and_bounds():
    a = post(1, "a", parent=2)
    b = post(2, "b", parent=1)
    selfish = post(3, "I reply to myself", parent=3)
    result = build_trees([a, selfish], [a, b, selfish])
    assert result.cycles_broken == 1 and result.self_replies == 1
    assert sorted(len(t.posts) for t in result.trees) == [1, 2]
    chain = [post(1, "root")] + [post(i, f"r{i}", parent=i - 1) for i in range(2, 30)]
    shallow = build_trees([chain[0]], chain, max_depth=3)
    assert len(shallow.trees[0].posts) == 4
    small = build_trees([chain[0]], chain, max_depth=100, max_size=10)
    assert len(small.trees[0].posts) == 10 and small.truncated_trees == 1


def test_canonical_url():
    assert (
        canonical_url("https://twitter.com/a/status/123?s=20")
        == canonical_url("https://x.com/b/status/123")
        == "x-status:123"
    )
    assert canonical_url("HTTPS://Example.com/Path/?q=1#x") == "https://example.com/Path"


# -- extract ------------------------------------------------------------------------------------------------------------
def _tree(*posts):
    return build_trees([posts[0]], list(posts)).trees[0]


def test_rules_extract_prompt_below_with_feedback():
    tree = _tree(
        post(1, "GPT-4o nailed this. Prompt below 👇", media=IMG),
        post(2, "A cat astronaut floating above Tokyo, ukiyo-e style", parent=1),
        post(3, "wow, the hands look wrong though", parent=1, author="bob"),
        post(4, "first!", parent=1, author="carol"),
    )
    [sample] = rules_extract(tree, "GPT-4o")
    assert sample.prompt == "A cat astronaut floating above Tokyo, ukiyo-e style"
    assert sample.post_urls == ("https://x.com/alice/status/2", "https://x.com/alice/status/1")
    assert sample.quality == "Benchmark" and sample.output_images == IMG
    assert [f.feedback for f in sample.community_feedback] == ["wow, the hands look wrong though"]
    assert sample.id == rules_extract(tree, "GPT-4o")[0].id  # deterministic


def test_rules_extract_markers_quotes_other_models_and_trash():
    marker = rules_extract(_tree(post(1, "Prompt: a red fox in the snow, film photo", media=IMG)), "GPT-4o")[
        0
    ]
    assert marker.prompt == "a red fox in the snow, film photo" and marker.quality == "Benchmark"
    quoted = rules_extract(
        _tree(post(1, 'Tried "a lighthouse made of glass at dusk, 35mm" and wow')), "GPT-4o"
    )[0]
    assert quoted.prompt == "a lighthouse made of glass at dusk, 35mm" and quoted.quality == "Analysis"
    other = rules_extract(_tree(post(1, "Midjourney v7 made this, prompt: a fox", media=IMG)), "GPT-4o")[0]
    assert other.quality == "Trash"
    assert rules_extract(_tree(post(1, "good morning")), "GPT-4o")[0].quality == "Trash"


def test_placeholders():
    assert find_placeholders("A figure of [Jackie Chan] holding {Programmer} at <your city>") == [
        "[Jackie Chan]",
        "{Programmer}",
        "<your city>",
    ]
    assert find_placeholders("桌面上摆放着一款【成龙】手办") == ["【成龙】"]
    assert find_placeholders("see [the paper](https://arxiv.org) (2025) for details") == []
    assert find_placeholders("a logo with (YOUR BRAND) text") == ["(YOUR BRAND)"]


def test_extract_with_a_scripted_llm(openai_server, tmp_path):
    tree = _tree(
        post(1, "Look what GPT-4o made", media=IMG),
        post(2, "prompt: a fox", parent=1),
        post(3, "so good", parent=1, author="bob"),
    )
    rendered = render_tree(tree)
    assert "[1] https://x.com/alice/status/1 (alice, 1 image(s))" in rendered
    assert "  [3] https://x.com/bob/status/3 (bob, 0 image(s))" in rendered

    answer = {
        "samples": [
            {
                "prompt": "a fox",
                "post_urls": [
                    "https://x.com/alice/status/2",
                    "https://x.com/alice/status/1",
                    "https://elsewhere.com/9",
                ],
                "quality": "Benchmark",
                "community_feedback": [{"post_url": "https://x.com/bob/status/3", "feedback": "so good"}],
            },
            {"prompt": "again", "post_urls": ["https://x.com/alice/status/1"], "quality": "Analysis"},
        ]
    }
    openai_server.reply = lambda body: "```json\n" + json.dumps(answer) + "\n```"
    result = run_extract([tree], target_model="GPT-4o", caller=_caller(openai_server, tmp_path))
    [sample] = result.samples  # the second sample only reused a post and was dropped
    assert sample.prompt == "a fox" and sample.source_post_ids == ("x:2", "x:1")
    assert sample.community_feedback[0].feedback == "so good"
    assert any("not in the tree" in n for n in result.notes) and any(
        "already used" in n for n in result.notes
    )
    openai_server.reply = lambda body: (
        '{"samples": [{"prompt": "x", "post_urls": ["u"], "quality": "Great"}]}'
    )
    failed = run_extract([tree], target_model="GPT-4o", caller=_caller(openai_server, tmp_path / "b"))
    assert (
        failed.samples == []
        and failed.failures[0].record_id == "x:1"
        and "Great" in failed.failures[0].raw_text
    )
