"""Privacy and provenance of the built dataset (issue 14, items 11-15).

- every field that can carry an account identifier is pseudonymized, checked by scanning the *published* files of
  a build of every source format for the raw identifiers of its input;
- a private pseudonym salt per build (kept out of the dataset and of what publish uploads, reused on --resume,
  shared with --salt-file), and ``publish --skip-pseudonym-check`` named for what it does;
- the card's license claims no rights the builder lacks;
- a config with no rows is not declared, so every declared config loads with ``datasets.load_dataset``;
- Analysis is its own tier, Manual Review always has its reason.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
from click.testing import CliRunner
from pydantic import ValidationError

from echo_builder.cli import cli
from echo_builder.pipeline import BuildConfig, build
from echo_builder.records import Sample
from echo_builder.sources import read_posts
from echo_builder.stages.tier import route, structural_tier
from echo_dataset.loading import load_config
from echo_dataset.pseudonym import DEFAULT_SALT, pseudonym, pseudonymize, pseudonymize_text
from echo_dataset.publish import upload_patterns
from echo_dataset.writer import ECHO_METADATA_KEY, write_hub_folder
from tests.conftest import REPO_ROOT, SHARED_DATA

SOURCES = REPO_ROOT / "tests" / "data" / "sources"
# words that match nearly every post, so that the rules baseline keeps them and they reach the dataset
KEYWORDS = "the\na\ni\nto\nis\nmodel\nimage\nprompt\n"

# identifiers in every place a post can carry them: author fields, mentions, post / profile / media URLs of the
# three platforms, a DID in a CDN URL, a URL-encoded DID in a video URL, an at:// URI, a user id on an unknown host
POSTS = [
    {"id": "x:100", "platform": "x", "url": "https://x.com/pixel_pat/status/100", "author_id": "4242424242",
     "author": "pixel_pat", "created_at": "2025-03-27T10:00:00Z",
     "text": 'Tried the new image model. Prompt: "a red fox in the snow, watercolor" cc @fox_fan',
     "media": [{"url": "https://media.example.net/users/4242424242/fox.png", "media_id": "3_1", "type": "photo"}],
     "root_id": "x:100"},
    {"id": "x:101", "platform": "x", "url": "https://x.com/fox_fan/status/101", "author_id": "777000111",
     "author": "fox_fan", "created_at": "2025-03-27T10:05:00Z",
     "text": "@pixel_pat the colors are too yellow https://x.com/i/user/4242424242", "reply_to_id": "x:100",
     "root_id": "x:100"},
    {"id": "bluesky:3kroot", "platform": "bluesky",
     "url": "https://bsky.app/profile/did:plc:skyartist99/post/3kroot", "author_id": "did:plc:skyartist99",
     "author": "sky.artist.bsky.social", "created_at": "2025-03-27T11:00:00Z",
     "text": 'New image model, prompt: "a lighthouse at dusk, oil painting" (thanks @helper.bsky.social)',
     "media": [{"url": "https://cdn.bsky.app/img/feed_fullsize/plain/did:plc:skyartist99/bafkreilight@jpeg",
                "type": "photo"},
               {"url": "https://video.bsky.app/watch/did%3Aplc%3Askyartist99/bafkreivid/playlist.m3u8",
                "type": "video"}],
     "root_id": "bluesky:3kroot"},
    {"id": "bluesky:3kreply", "platform": "bluesky",
     "url": "https://bsky.app/profile/helper.bsky.social/post/3kreply", "author_id": "did:plc:helper12345",
     "author": "helper.bsky.social", "created_at": "2025-03-27T11:10:00Z",
     "text": "the sky turned orange, see at://did:plc:skyartist99/app.bsky.feed.post/3kroot",
     "reply_to_id": "bluesky:3kroot", "root_id": "bluesky:3kroot"},
    {"id": "reddit:t3_abc", "platform": "reddit",
     "url": "https://www.reddit.com/r/u_redditor_rae/comments/abc/my_new_model_try/", "author_id": "t2_rae01",
     "author": "redditor_rae", "created_at": "2025-03-27T12:00:00Z",
     "text": 'New image model. Prompt: "a cat astronaut, photo"',
     "media": [{"url": "https://i.redd.it/catastro.png", "type": "photo"}], "root_id": "reddit:t3_abc"},
]  # fmt: skip


def _posts_file(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "posts.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in POSTS), encoding="utf-8")
    return path


def _keywords(folder: Path) -> Path:
    path = folder / "keywords.txt"
    path.write_text(KEYWORDS, encoding="utf-8")
    return path


def _published_text(out: Path) -> tuple[str, int]:
    """Everything ``publish`` would upload from ``out``, as text (image bytes left out), and the row count."""
    texts, rows = [], 0
    for name in upload_patterns(out):
        path = out / name
        if path.suffix == ".parquet":
            table = pq.read_table(path)
            rows += table.num_rows
            texts.append(json.dumps(table.drop_columns(["input_images", "output_images"]).to_pylist()))
            texts += [str(i["path"]) for c in ("input_images", "output_images") for r in table[c].to_pylist()
                      for i in r if i]  # fmt: skip
        else:
            texts.append(path.read_text(encoding="utf-8"))
    return "\n".join(texts), rows


def _raw_identifiers(sources: list[Path]) -> set[str]:
    """The input's account identifiers, read independently of the pseudonymizer: authors' handles and ids from the
    adapters' posts, and every DID in the raw files (with its method-specific part, which alone identifies)."""
    found: set[str] = set()
    for post in read_posts(sources).posts:
        for value in (post.author, post.author_id):
            if value and not value.startswith("["):
                found.add(value.lstrip("@"))
    files = [f for s in sources for f in ([s] if s.is_file() else sorted(s.rglob("*"))) if f.is_file()]
    for file in files:
        text = file.read_text(encoding="utf-8", errors="replace").replace("%3A", ":")
        for did in re.findall(r"did:[a-z0-9]+:[A-Za-z0-9._-]+", text):
            found |= {did, did.split(":", 2)[2]}
    return {i for i in found if len(i) >= 3}


def _leaks(text: str, identifiers: set[str]) -> list[str]:
    return sorted(
        i
        for i in identifiers
        if re.search(rf"(?<![A-Za-z0-9]){re.escape(i)}(?![A-Za-z0-9])", text, re.IGNORECASE)
    )


def _build(sources: list[Path], out: Path, **kw) -> None:
    build(
        BuildConfig(
            sources=sources,
            out_dir=out,
            keywords_file=_keywords(out.parent),
            relevance_threshold=1,
            offline=True,
            progress=False,
            **kw,
        )
    )


# -- 14.11: every identifier-bearing field --------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "identifier"),
    [
        ("https://cdn.bsky.app/img/feed_fullsize/plain/did:plc:abcd1234efgh/bafkrei@jpeg", "did:plc:abcd1234efgh"),
        ("https://cdn.bsky.app/img/avatar/plain/did:plc:abcd1234efgh/bafkrei@jpeg", "did:plc:abcd1234efgh"),
        ("https://video.bsky.app/watch/did%3Aplc%3Aabcd1234efgh/bafk/playlist.m3u8", "did:plc:abcd1234efgh"),
        ("https://bsky.social/xrpc/com.atproto.sync.getBlob?did=did:web:alice.example.com&cid=b", "did:web:alice.example.com"),
        ("at://did:plc:abcd1234efgh/app.bsky.feed.post/3k", "did:plc:abcd1234efgh"),
        ("https://bsky.app/profile/did:plc:abcd1234efgh/post/3k", "did:plc:abcd1234efgh"),
        ("at://alice.bsky.social/app.bsky.feed.post/3k", "alice.bsky.social"),
        ("https://x.com/i/user/1234567", "1234567"),
        ("https://twitter.com/intent/user?user_id=1234567", "1234567"),
        ("https://twitter.com/intent/user?screen_name=alice_x", "alice_x"),
        ("https://pbs.twimg.com/profile_images/1234567/photo.jpg", "1234567"),
        ("https://pbs.twimg.com/profile_banners/1234567/1500", "1234567"),
        ("https://www.reddit.com/r/u_alice_r/comments/abc/title/", "alice_r"),
        ("posted on r/u_alice_r", "alice_r"),
    ],
)  # fmt: skip
def test_every_form_of_account_identifier_is_pseudonymized(text, identifier):
    out = pseudonymize_text(text)
    assert identifier.split(":")[-1] not in out.lower()
    assert pseudonym(identifier) in out  # the same account gets the same pseudonym in every form
    assert pseudonymize_text(out) == out  # idempotent


def test_pseudonymization_keeps_what_identifies_no_account():
    for text in (
        "https://pbs.twimg.com/media/Gx1.jpg",
        "https://x.com/i/web/status/190000",
        "https://www.reddit.com/r/aiArt/comments/abc/t/",
        "https://i.redd.it/abc.png",
        "mail alice@example.com",
        "https://cdn.bsky.app/img/feed_fullsize/plain/user_1a2b3c4d/bafk@jpeg",
    ):
        assert pseudonymize_text(text) == text


def test_known_identifiers_are_replaced_inside_any_url_but_not_in_prose():
    rows = [
        {
            "id": "a",
            "prompt": "alice_art draws like @alice_art",
            "output_image_urls": [
                "https://img.example.net/u/alice_art/1.png",
                "https://e.net/99887766/p.png",
            ],
            "media_errors": ["https://img.example.net/u/alice_art/1.png: HTTP 404"],
        }
    ]
    [row] = pseudonymize(rows, identifiers=["@alice_art", "99887766", "[deleted]", "ab"])
    alice = pseudonym("alice_art")
    # a bare word that equals a handle is prose; a mention is not
    assert row["prompt"] == f"alice_art draws like @{alice}"
    assert row["output_image_urls"] == [f"https://img.example.net/u/{alice}/1.png", f"https://e.net/{pseudonym('99887766')}/p.png"]  # fmt: skip
    assert row["media_errors"] == [f"https://img.example.net/u/{alice}/1.png: HTTP 404"]


def _source_cases() -> list:
    local = [pytest.param([SOURCES / name], id=name) for name in sorted(p.name for p in SOURCES.iterdir())]
    shared = SHARED_DATA / "api_recordings"
    folders = ["bluesky/recorded", "reddit/extracted", "x_api_v2/academictwitteR/extracted",
               "x_api_v2/twarc-csv/extracted", "x_api_v2/tweepy/extracted"]  # fmt: skip
    recorded = [
        pytest.param(
            [shared / f],
            id="api_recordings/" + f,
            marks=[
                pytest.mark.shared_data,
                pytest.mark.skipif(not (shared / f).is_dir(), reason="no shared data"),
            ],
        )
        for f in folders
    ]
    return [*local, *recorded]


@pytest.mark.parametrize("sources", _source_cases())
def test_published_files_of_every_source_format_hold_no_raw_identifier(sources, tmp_path):
    out = tmp_path / "out"
    _build(sources, out)
    identifiers = _raw_identifiers(sources)
    text, _rows = _published_text(out)
    assert _leaks(text, identifiers) == []


def test_published_files_of_identifier_laden_posts_hold_none(tmp_path):
    posts = _posts_file(tmp_path)
    out = tmp_path / "out"
    _build([posts], out)
    identifiers = _raw_identifiers([posts])
    assert {"did:plc:skyartist99", "skyartist99", "4242424242", "pixel_pat", "redditor_rae"} <= identifiers
    text, rows = _published_text(out)
    assert rows == 3  # one sample per thread reached the dataset, so the scan is not vacuous
    assert _leaks(text, identifiers) == []
    # while the build's own stage files (never published) keep the raw posts
    assert "did:plc:skyartist99" in (out / "stages" / "collect.jsonl").read_text()


# -- 14.12: the salt ------------------------------------------------------------------------------------------------
def _pseudonyms(out: Path) -> set[str]:
    text, _ = _published_text(out)
    return set(re.findall(r"user_[0-9a-f]{8}", text))


def test_each_build_has_its_own_private_salt_kept_out_of_what_is_published(tmp_path):
    posts = _posts_file(tmp_path)
    runner = CliRunner()
    outs = [tmp_path / "one", tmp_path / "two"]
    for out in outs:
        result = runner.invoke(cli, ["build", str(posts), "--out", str(out), "--offline", "--keywords",
                                     str(_keywords(tmp_path)), "--threshold", "1"])  # fmt: skip
        assert result.exit_code == 0, result.output
    one, two = (_pseudonyms(o) for o in outs)
    assert one and two and not one & two  # a pseudonym of one build says nothing about the other's
    assert (
        pseudonym("pixel_pat") not in one
    )  # not the public default salt: a known handle cannot be looked up
    salt_file = outs[0] / "stages" / "salt"
    salt = salt_file.read_text().strip()
    assert len(salt) == 64 and salt_file.stat().st_mode & 0o077 == 0
    assert pseudonym("pixel_pat", salt=salt) in one
    text, _ = _published_text(outs[0])
    assert salt not in text and "stages/salt" not in upload_patterns(outs[0])
    assert "private salt" in (outs[0] / "README.md").read_text()
    meta = json.loads(
        pq.read_schema(outs[0] / "analysis" / "test-00000-of-00001.parquet").metadata[ECHO_METADATA_KEY]
    )
    assert meta == {"pseudonymized": True, "public_salt": False}


def test_resume_keeps_the_salt_and_a_salt_file_shares_it(tmp_path):
    posts = _posts_file(tmp_path)
    shared = tmp_path / "salt.txt"
    shared.write_text("a-team-salt-kept-for-every-release\n")
    runner = CliRunner()
    base = ["build", str(posts), "--offline", "--keywords", str(_keywords(tmp_path)), "--threshold", "1"]
    shard = "analysis/test-00000-of-00001.parquet"
    first = tmp_path / "first"
    assert runner.invoke(cli, [*base, "--out", str(first)]).exit_code == 0
    before = (first / shard).read_bytes()
    (first / shard).unlink()
    assert runner.invoke(cli, [*base, "--out", str(first), "--resume"]).exit_code == 0
    assert (first / shard).read_bytes() == before  # same salt on resume: the same pseudonyms
    a, b = tmp_path / "a", tmp_path / "b"
    for out in (a, b):
        assert runner.invoke(cli, [*base, "--out", str(out), "--salt-file", str(shared)]).exit_code == 0
    assert (a / shard).read_bytes() == (b / shard).read_bytes()
    assert pseudonym("pixel_pat", salt="a-team-salt-kept-for-every-release") in _pseudonyms(a)
    # resuming without --salt-file keeps the build's salt; with another salt it is refused
    assert runner.invoke(cli, [*base, "--out", str(a), "--resume"]).exit_code == 0
    assert (a / shard).read_bytes() == (b / shard).read_bytes()
    other = tmp_path / "other.txt"
    other.write_text("another-salt-of-enough-length\n")
    refused = runner.invoke(cli, [*base, "--out", str(a), "--resume", "--salt-file", str(other)])
    assert refused.exit_code == 1 and "another salt" in refused.output


@pytest.mark.parametrize(
    ("content", "fragment"),
    [(None, "does not exist"), ("short", "holds 5 characters"), (b"\xff\xfe" * 20, "UTF-8")],
)
def test_a_bad_salt_file_is_one_error_line_and_nothing_is_written(tmp_path, content, fragment):
    posts = _posts_file(tmp_path)
    salt = tmp_path / "salt.txt"
    if isinstance(content, bytes):
        salt.write_bytes(content)
    elif content is not None:
        salt.write_text(content)
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["build", str(posts), "--out", str(out), "--salt-file", str(salt)])
    assert result.exit_code == 1 and "Traceback" not in result.output
    [line] = [x for x in result.output.splitlines() if x.strip() and not x.startswith("note:")]
    assert line.startswith("error: ") and fragment in line and "salt.txt" in line
    assert not out.exists()


def _fake_hub(monkeypatch) -> list:
    uploads: list = []

    class Api:
        def __init__(self, token=None):
            pass

        def create_repo(self, *a, **k):
            return None

        def upload_folder(self, **kwargs):
            uploads.append(kwargs)
            return "commit"

    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "HfApi", Api)
    monkeypatch.setenv("HF_TOKEN", "hf_test")
    return uploads


def test_publish_skip_pseudonym_check_is_named_for_what_it_does(tmp_path, monkeypatch):
    uploads = _fake_hub(monkeypatch)
    raw = write_hub_folder({}, tmp_path / "raw", card_context={}, pseudonymize=False)
    runner = CliRunner()
    refused = runner.invoke(cli, ["publish", str(raw), "--repo-id", "me/echo"])
    assert refused.exit_code == 1 and "--skip-pseudonym-check" in refused.output and not uploads
    done = runner.invoke(cli, ["publish", str(raw), "--repo-id", "me/echo", "--skip-pseudonym-check"])
    assert done.exit_code == 0, done.output
    old = runner.invoke(cli, ["publish", str(raw), "--repo-id", "me/echo", "--no-pseudonymize"])
    assert old.exit_code == 0 and "deprecated" in old.output and "--skip-pseudonym-check" in old.output
    assert len(uploads) == 2
    public = write_hub_folder({}, tmp_path / "public", card_context={})  # pseudonymized with the public salt
    warned = runner.invoke(cli, ["publish", str(public), "--repo-id", "me/echo"])
    assert warned.exit_code == 0 and "public default salt" in warned.output
    assert "public default salt" not in done.output
    help_text = runner.invoke(cli, ["publish", "--help"]).output
    assert "--skip-pseudonym-check" in help_text
    assert not re.search(r"^\s+--no-pseudonymize", help_text, re.MULTILINE)  # the old name is hidden


# -- 14.13: the license ---------------------------------------------------------------------------------------------
def _front_matter(readme: Path) -> dict:
    return yaml.safe_load(readme.read_text().split("---\n")[1])


def test_the_card_claims_no_license_the_builder_does_not_hold(tmp_path):
    posts = _posts_file(tmp_path)
    runner = CliRunner()
    base = ["build", str(posts), "--offline", "--keywords", str(_keywords(tmp_path)), "--threshold", "1"]
    assert runner.invoke(cli, [*base, "--out", str(tmp_path / "default")]).exit_code == 0
    card = (tmp_path / "default" / "README.md").read_text()
    meta = _front_matter(tmp_path / "default" / "README.md")
    assert meta["license"] == "other" and meta["license_name"] == "echo-research-evaluation"
    license_section = card.split("## License")[1].split("##")[0]
    assert "grants no license" in license_section and "research evaluation" in license_section
    assert "cc-by-4.0" not in card
    assert runner.invoke(cli, [*base, "--out", str(tmp_path / "cc"), "--license", "cc-by-4.0"]).exit_code == 0
    meta = _front_matter(tmp_path / "cc" / "README.md")
    assert meta["license"] == "cc-by-4.0" and "license_name" not in meta
    bad = runner.invoke(cli, [*base, "--out", str(tmp_path / "bad"), "--license", "CC BY 4.0\nevil: 1"])
    assert bad.exit_code == 1 and "is not a Hub license id" in bad.output and not (tmp_path / "bad").exists()
    help_text = " ".join(runner.invoke(cli, ["build", "--help"]).output.split())
    assert "[default: other]" in help_text and "claims no rights" in help_text


# -- 14.14: configs with no rows ------------------------------------------------------------------------------------
def test_every_declared_config_loads_and_an_empty_one_is_not_declared(tmp_path):
    import datasets

    rows = [
        {"id": "t1", "prompt": "a fox", "output_image_urls": ["https://e.com/f.png"], "output_images": [None]}
    ]
    folder = write_hub_folder({"text_to_image": rows}, tmp_path / "hub", card_context={})
    meta = _front_matter(folder / "README.md")
    assert [c["config_name"] for c in meta["configs"]] == ["text_to_image"]
    assert [i["config_name"] for i in meta["dataset_info"]] == ["text_to_image"]
    cache = tmp_path / "hf-cache"
    loaded = datasets.load_dataset(str(folder), "text_to_image", cache_dir=str(cache))["test"]
    assert loaded["id"] == ["t1"]
    with pytest.raises(ValueError, match="text_to_image"):  # not declared: datasets names what is available
        datasets.load_dataset(str(folder), "analysis", cache_dir=str(cache))
    empty = load_config(folder, "analysis")  # the empty Parquet file stays, read as an empty split
    assert empty.num_rows == 0 and empty.features == loaded.features
    assert "No rows in this build: `image_to_image`, `analysis`" in (folder / "README.md").read_text()


def test_a_build_with_empty_configs_loads_every_declared_config(tmp_path):
    import datasets

    out = tmp_path / "out"
    _build([SOURCES / "bluesky_thread.json"], out)
    declared = [c["config_name"] for c in _front_matter(out / "README.md")["configs"]]
    counts = {s["name"]: s for s in json.loads((out / "report.json").read_text())["stages"]}["applicability"]
    assert declared == [c for c, n in counts["configs"].items() if n] == ["analysis"]
    for config in declared:
        assert datasets.load_dataset(str(out), config, cache_dir=str(tmp_path / "c"))["test"].num_rows == 1


# -- 14.15: tiers ---------------------------------------------------------------------------------------------------
def test_analysis_is_its_own_tier_and_manual_review_always_has_its_reason():
    analysis = Sample(id="s1", prompt="why is it yellow?", quality="Analysis")
    assert structural_tier(analysis) == ("Analysis", None)
    tiered = analysis.model_copy(update={"tier": "Analysis"})
    assert route(tiered) == "analysis"
    with pytest.raises(ValidationError, match="review reason"):
        Sample(id="s2", prompt="a fox", tier="Manual Review")
    with pytest.raises(ValidationError):
        Sample(id="s3", prompt="a fox", tier="Manual Review", review="looks odd")  # not one of the three
    assert Sample(id="s4", prompt="a fox", tier="Manual Review", review="prompt").review == "prompt"


def test_built_rows_have_no_manual_review_without_a_reason(tmp_path):
    out = tmp_path / "out"
    _build([SOURCES / "collection"], out)
    rows = [r for f in sorted(out.glob("*/test-*.parquet")) for r in pq.read_table(f).to_pylist()]
    assert rows
    assert all(
        r["review"] in ("prompt", "input image", "output image") for r in rows if r["tier"] == "Manual Review"
    )
    assert all(r["review"] is None for r in rows if r["tier"] == "Analysis")
    tier = {s["name"]: s for s in json.loads((out / "report.json").read_text())["stages"]}["tier"]
    assert tier["Analysis"] == sum(1 for r in rows if r["tier"] == "Analysis")


def test_default_salt_is_still_the_public_one_for_direct_python_use(tmp_path):
    folder = write_hub_folder(
        {"text_to_image": [{"id": "a", "prompt": "by @alice"}]}, tmp_path / "hub", card_context={}
    )
    assert pq.read_table(folder / "text_to_image" / "test-00000-of-00001.parquet")["prompt"].to_pylist() == [
        f"by @{pseudonym('alice', salt=DEFAULT_SALT)}"
    ]
    assert "public default salt" in (folder / "README.md").read_text()


def test_the_echobench_builder_uses_the_build_salt_and_authors(tmp_path):
    from echo_dataset.builder import EchoBench

    posts = _posts_file(tmp_path)
    out = tmp_path / "out"
    _build([posts], out)
    builder = EchoBench(config_name="analysis", data_dir=str(out), cache_dir=str(tmp_path / "hf"))
    builder.download_and_prepare()
    from_builder = builder.as_dataset("test")
    written = pq.read_table(out / "analysis" / "test-00000-of-00001.parquet").to_pylist()
    for column in ("prompt", "output_image_urls", "source_post_urls", "community_feedback", "media_errors"):
        assert from_builder[column] == [r[column] for r in written], column
