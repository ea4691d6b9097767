"""echo_dataset.publish with a fake HfApi, and pseudonymization of handles."""

from __future__ import annotations

from pathlib import Path

import pytest
from huggingface_hub.utils import filter_repo_objects

from echo_dataset.errors import InvalidHubFolderError, MissingTokenError
from echo_dataset.pseudonym import pseudonym, pseudonymize, pseudonymize_text
from echo_dataset.publish import publish, validate_hub_folder
from echo_dataset.writer import write_hub_folder


class FakeApi:
    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple, dict]] = []

    def create_repo(self, *args, **kwargs):
        self.calls.append(("create_repo", args, kwargs))
        return "https://huggingface.co/datasets/" + args[0]

    def upload_folder(self, *args, **kwargs):
        self.calls.append(("upload_folder", args, kwargs))
        # what the real client would send, selected by huggingface_hub's own pattern filter
        root = Path(kwargs["folder_path"])
        local = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
        self.uploaded = set(
            filter_repo_objects(local, allow_patterns=kwargs.get("allow_patterns"), ignore_patterns=None)
        )
        return "commit-info"


@pytest.fixture
def hub(tmp_path: Path) -> Path:
    rows = [{"id": "a", "prompt": "by @alice", "source_post_urls": ["https://x.com/alice/status/1"]}]
    return write_hub_folder({"text_to_image": rows}, tmp_path / "hub", card_context={})


def test_publish_creates_the_repo_then_uploads_the_folder(hub: Path):
    api = FakeApi()
    result = publish(hub, "me/echo", api=api, private=True, commit_message="v1")
    assert result == "commit-info"
    assert api.calls == [
        ("create_repo", ("me/echo",), {"repo_type": "dataset", "exist_ok": True, "private": True}),
        (
            "upload_folder",
            (),
            {
                "folder_path": str(hub),
                "repo_id": "me/echo",
                "repo_type": "dataset",
                "commit_message": "v1",
                "allow_patterns": [
                    "README.md",
                    "image_to_image/test-00000-of-00001.parquet",
                    "text_to_image/test-00000-of-00001.parquet",
                    "analysis/test-00000-of-00001.parquet",
                ],
                "delete_patterns": [
                    "image_to_image/*.parquet",
                    "text_to_image/*.parquet",
                    "analysis/*.parquet",
                ],
            },
        ),
    ]


def test_publish_uploads_only_the_dataset_from_a_build_folder(hub: Path):
    # a build folder also holds the raw posts (real handles), the call cache and the media store
    for extra in (
        "stages/collect.jsonl",
        "cache/calls.sqlite",
        "media/ab/abcdef.png",
        "report.json",
        "build.json",
    ):
        (hub / extra).parent.mkdir(parents=True, exist_ok=True)
        (hub / extra).write_text("@alice", encoding="utf-8")
    api = FakeApi()
    publish(hub, "me/echo", api=api)
    assert api.uploaded == {
        "README.md",
        "text_to_image/test-00000-of-00001.parquet",
        "image_to_image/test-00000-of-00001.parquet",
        "analysis/test-00000-of-00001.parquet",
    }


def test_no_token_fails_before_any_work(hub: Path, monkeypatch: pytest.MonkeyPatch):
    import huggingface_hub

    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr(huggingface_hub, "get_token", lambda: None)
    created = []
    monkeypatch.setattr(huggingface_hub, "HfApi", lambda **kw: created.append(kw))
    with pytest.raises(MissingTokenError, match="HF_TOKEN"):
        publish(hub, "me/echo")
    assert created == []


def test_token_from_environment_builds_the_api(hub: Path, monkeypatch: pytest.MonkeyPatch):
    import huggingface_hub

    fake = FakeApi()
    seen = []
    monkeypatch.setenv("HF_TOKEN", "hf_test_token")
    monkeypatch.setattr(huggingface_hub, "HfApi", lambda **kw: seen.append(kw) or fake)
    publish(hub, "me/echo")
    assert seen == [{"token": "hf_test_token"}]
    assert [c[0] for c in fake.calls] == ["create_repo", "upload_folder"]


@pytest.mark.parametrize("remove", ["README.md", "analysis/test-00000-of-00001.parquet"])
def test_invalid_folder_fails_before_any_call(hub: Path, remove: str):
    (hub / remove).unlink()
    api = FakeApi()
    with pytest.raises(InvalidHubFolderError, match=remove.split("/")[0]):
        publish(hub, "me/echo", api=api)
    assert api.calls == []


def test_missing_folder_and_bad_repo_id(tmp_path: Path, hub: Path):
    api = FakeApi()
    with pytest.raises(InvalidHubFolderError, match="not a folder"):
        publish(tmp_path / "nope", "me/echo", api=api)
    with pytest.raises(InvalidHubFolderError, match="owner/name"):
        publish(hub, "echo", api=api)
    assert api.calls == []


def test_publish_refuses_a_folder_written_without_pseudonyms(tmp_path: Path):
    folder = write_hub_folder({}, tmp_path / "raw", card_context={}, pseudonymize=False)
    api = FakeApi()
    with pytest.raises(InvalidHubFolderError, match="pseudonymize=True"):
        publish(folder, "me/echo", api=api)
    assert api.calls == []
    publish(folder, "me/echo", api=api, check_pseudonymized=False)
    assert len(api.calls) == 2
    with pytest.warns(DeprecationWarning, match="check_pseudonymized"):  # the old name still skips the check
        publish(folder, "me/echo", api=api, pseudonymize=False)
    assert len(api.calls) == 4
    assert len(validate_hub_folder(folder)) == 3


def test_pseudonymize_coverage():
    alice, bob, carol, dave = (pseudonym(h) for h in ("alice", "bob", "carol.bsky.social", "dave_1"))
    cases = {
        "thanks @Alice and @alice!": f"thanks @{alice} and @{alice}!",
        "ask @carol.bsky.social.": f"ask @{carol}.",
        "mail alice@example.com": "mail alice@example.com",
        "https://x.com/alice/status/1": f"https://x.com/{alice}/status/1",
        "https://twitter.com/Alice": f"https://twitter.com/{alice}",
        "https://mobile.twitter.com/bob/status/2?s=20": f"https://mobile.twitter.com/{bob}/status/2?s=20",
        "https://x.com/i/web/status/3": "https://x.com/i/web/status/3",
        "https://bsky.app/profile/carol.bsky.social/post/3k": f"https://bsky.app/profile/{carol}/post/3k",
        "https://www.reddit.com/user/dave_1/": f"https://www.reddit.com/user/{dave}/",
        "https://old.reddit.com/u/dave_1": f"https://old.reddit.com/u/{dave}",
        "see u/dave_1 or /u/dave_1": f"see u/{dave} or /u/{dave}",
        "https://www.reddit.com/r/ChatGPT/comments/abc/t/": "https://www.reddit.com/r/ChatGPT/comments/abc/t/",
        "https://pbs.twimg.com/media/Gx1.jpg": "https://pbs.twimg.com/media/Gx1.jpg",
    }
    for text, expected in cases.items():
        assert pseudonymize_text(text) == expected, text
        assert pseudonymize_text(expected) == expected  # idempotent: pseudonyms are not replaced again
    assert "did:plc" not in pseudonymize_text("https://bsky.app/profile/did:plc:abc123/post/3k")


def test_pseudonymize_rows_is_deterministic_and_salted():
    rows = [
        {
            "id": "x:@keep",
            "prompt": "@alice",
            "author": "Alice",
            "community_feedback": [{"post_url": "https://x.com/bob/status/2", "feedback": "cc @alice"}],
            "output_images": [{"bytes": b"@alice", "path": "@alice.png"}, None],
            "has_nsfw": None,
        }
    ]
    once = pseudonymize(rows)
    assert once == pseudonymize(rows) == pseudonymize(once)
    assert rows[0]["prompt"] == "@alice"  # input untouched
    alice = pseudonym("alice")
    assert once[0]["id"] == "x:@keep"
    assert once[0]["prompt"] == f"@{alice}" and once[0]["author"] == alice
    assert once[0]["community_feedback"][0] == {
        "post_url": f"https://x.com/{pseudonym('bob')}/status/2",
        "feedback": f"cc @{alice}",
    }
    assert once[0]["output_images"] == rows[0]["output_images"]
    other = pseudonymize(rows, salt="secret")
    assert other[0]["prompt"] != once[0]["prompt"] and other[0]["prompt"].startswith("@user_")
    assert len(alice) == len("user_") + 8
