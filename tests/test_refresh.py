"""Versioned refresh (issue 19, item 4): ``build --previous`` keeps ids, carries, removes with reasons; ``diff``.

The datasets are constructed so that every count is known: version 1 has five samples A-E (posts at T0 + 0, 3, 6,
9, 12 minutes); the second collection window reads C's post again (T0 + 6 min), D's post edited into an irrelevant
one, and two new posts a day later, F (taken down) and G. So: G added; C kept (same id); A carried (posted before
the new window); B removed (takedown of its post); D removed (filtered: its post was read, the sample is gone);
E removed (deleted: posted inside the new window, not read again); F withheld.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace
from typing import ClassVar

import pytest
from click.testing import CliRunner

from echo_builder.cli import cli
from echo_builder.ids import sample_id
from echo_builder.records import MediaRef, Post
from echo_dataset.errors import EchoDatasetError, InvalidHubFolderError
from echo_dataset.loading import read_config
from echo_dataset.publish import publish
from echo_dataset.versioning import bump_minor, card_version, check_version, diff_datasets

T0 = datetime(2025, 3, 26, tzinfo=timezone.utc)
N = {"A": 1000, "B": 1003, "C": 1006, "D": 1009, "E": 1012, "F": 3001, "G": 3002}
ID = {k: sample_id([f"x:{n}"]) for k, n in N.items()}


def _post(n: int, minutes: float, relevant: bool = True) -> Post:
    return Post(
        id=f"x:{n}",
        platform="x",
        url=f"https://x.com/u{n}/status/{n}",
        author_id=f"u{n}",
        text=f"GPT-4o made this! prompt: a cat number {n}" if relevant else f"gpt-4o api pricing note {n}",
        created_at=T0 + timedelta(minutes=minutes),
        media=(MediaRef(url=f"https://e.com/{n}.png"),) if relevant else (),
    )


def _write(path, posts):
    path.write_text("\n".join(p.model_dump_json() for p in posts) + "\n")
    return path


def _build(*args):
    result = CliRunner().invoke(cli, ["build", *map(str, args), "--offline", "--target-model", "GPT-4o"])
    assert result.exit_code == 0, result.output
    return result


@pytest.fixture(scope="module")
def versions(tmp_path_factory):
    root = tmp_path_factory.mktemp("refresh")
    first = _write(
        root / "v1.jsonl", [_post(N[k], m) for k, m in zip("ABCDE", (0, 3, 6, 9, 12), strict=True)]
    )
    _build(first, "--out", root / "v1", "--version", "1.0.0")
    second = _write(
        root / "v2.jsonl",
        [_post(N["C"], 6), _post(N["D"], 9, relevant=False), _post(N["F"], 1440), _post(N["G"], 1441)],
    )
    takedowns = root / "takedowns.txt"
    takedowns.write_text("# authors' requests\nx:1003\nx:3001  # F\n")
    output = _build(second, "--out", root / "v2", "--previous", root / "v1", "--takedowns", takedowns).output
    return root, output


def test_refresh_keeps_ids_carries_and_records_removals(versions):
    root, output = versions
    v1 = {r["id"]: r for r in read_config(root / "v1", "analysis")}
    v2 = {r["id"]: r for r in read_config(root / "v2", "analysis")}
    assert set(v1) == {ID[k] for k in "ABCDE"}
    assert set(v2) == {ID["A"], ID["C"], ID["G"]}  # the same ids as in version 1 where the sample stayed
    assert v2[ID["A"]] == v1[ID["A"]]  # carried over unchanged, row for row
    changes = json.loads((root / "v2" / "changes.json").read_text())
    assert changes["version"] == "1.1.0"
    assert changes["previous"] == {"source": str(root / "v1"), "version": "1.0.0"}
    assert changes["window"] == ["2025-03-26T00:06:00Z", "2025-03-27T00:01:00Z"]
    assert changes["added"] == {"analysis": [ID["G"]]}
    assert changes["kept"] == {"analysis": [ID["C"]]}
    assert changes["carried"] == {"analysis": [ID["A"]]}
    assert changes["withheld"] == [ID["F"]]
    assert sorted((r["id"], r["reason"]) for r in changes["removed"]) == sorted(
        [(ID["B"], "takedown"), (ID["D"], "filtered"), (ID["E"], "deleted")]
    )
    assert changes["counts"] == {
        "added": 1,
        "kept": 1,
        "carried": 1,
        "removed": 3,
        "withheld": 1,
        "removed_by_reason": {"deleted": 1, "filtered": 1, "takedown": 1},
    }
    assert (
        "version 1.1.0: added 1, kept 1, carried over 1, removed 3 (deleted 1, filtered 1, takedown 1)"
        in output
    )
    assert card_version(root / "v1") == "1.0.0" and card_version(root / "v2") == "1.1.0"
    card = (root / "v2" / "README.md").read_text()
    assert "## Version" in card and "Version **1.1.0**, posts collected 2025-03-26T00:06:00Z to" in card
    assert "| carried over unchanged (outside this window) | 1 |" in card
    assert card.index("## Version") < card.index("## Configs")


def test_diff_counts_match_the_construction(versions):
    root, _ = versions
    diff = diff_datasets(root / "v1", root / "v2")
    analysis = diff["configs"]["analysis"]
    assert (analysis["old"], analysis["new"]) == (5, 3)
    assert analysis["added"] == [ID["G"]]
    assert analysis["removed"] == sorted(ID[k] for k in "BDE")
    assert diff["totals"] == {"old": 5, "new": 3, "added": 1, "removed": 3, "kept": 2}
    assert (diff["old"]["version"], diff["new"]["version"]) == ("1.0.0", "1.1.0")
    shown = CliRunner().invoke(cli, ["diff", str(root / "v1"), str(root / "v2")])
    assert shown.exit_code == 0, shown.output
    assert "analysis               5       3       1        3" in shown.output
    assert f"added in analysis: {ID['G']}" in shown.output
    as_json = CliRunner().invoke(cli, ["diff", str(root / "v1"), str(root / "v2"), "--format", "json"])
    assert json.loads(as_json.output)["totals"]["removed"] == 3


def test_plain_build_has_no_version(versions):
    root, _ = versions
    plain = root / "plain"
    _build(root / "v1.jsonl", "--out", plain)
    assert not (plain / "changes.json").exists()
    assert card_version(plain) is None and "## Version" not in (plain / "README.md").read_text()
    assert "refresh" not in json.loads((plain / "report.json").read_text())


def test_semver_helpers_and_bad_inputs(tmp_path, versions):
    root, _ = versions
    assert (
        bump_minor(None) == "1.0.0" and bump_minor("1.4.2") == "1.5.0" and check_version(" 2.0.0") == "2.0.0"
    )
    for bad in ("1.0", "v1.0.0", "01.2.3", "1.2.3-rc1"):
        with pytest.raises(EchoDatasetError, match=r"MAJOR\.MINOR\.PATCH"):
            check_version(bad)
    base = ["build", str(root / "v1.jsonl"), "--offline"]
    bad_version = CliRunner().invoke(cli, [*base, "--out", str(tmp_path / "a"), "--version", "1.2"])
    assert bad_version.exit_code != 0 and "--version" in bad_version.output and not (tmp_path / "a").exists()
    missing = CliRunner().invoke(
        cli, [*base, "--out", str(tmp_path / "b"), "--previous", str(tmp_path / "nope")]
    )
    assert missing.exit_code != 0 and "--previous" in missing.output and not (tmp_path / "b").exists()
    (tmp_path / "t.txt").write_text("not-an-id\n")
    bad_line = CliRunner().invoke(
        cli, [*base, "--out", str(tmp_path / "c"), "--takedowns", str(tmp_path / "t.txt")]
    )
    assert bad_line.exit_code != 0 and "t.txt:1" in bad_line.output and not (tmp_path / "c").exists()


class TaggingApi:
    """A fake HfApi recording calls; upload_folder returns a commit with an ``oid``, as CommitInfo does."""

    calls: ClassVar[list[tuple[str, tuple, dict]]] = []

    def __init__(self, token=None) -> None:
        type(self).calls = []

    def create_repo(self, *args, **kwargs):
        self.calls.append(("create_repo", args, kwargs))

    def upload_folder(self, **kwargs):
        self.calls.append(("upload_folder", (), kwargs))
        return SimpleNamespace(oid="c0ffee" * 6 + "abcd")

    def create_tag(self, *args, **kwargs):
        self.calls.append(("create_tag", args, kwargs))


def test_publish_version_tags_the_uploaded_commit(versions, monkeypatch):
    import huggingface_hub

    root, _ = versions
    api = TaggingApi()
    publish(root / "v2", "me/echo", api=api, version="1.1.0")
    assert [c[0] for c in api.calls] == ["create_repo", "upload_folder", "create_tag"]
    assert api.calls[2] == (
        "create_tag",
        ("me/echo",),
        {
            "tag": "v1.1.0",
            "tag_message": "ECHO benchmark version 1.1.0",
            "revision": "c0ffee" * 6 + "abcd",
            "repo_type": "dataset",
        },
    )
    refused = TaggingApi()
    with pytest.raises(InvalidHubFolderError, match=r"differs from the version .* \(1\.1\.0\)"):
        publish(root / "v2", "me/echo", api=refused, version="2.0.0")
    assert refused.calls == []  # nothing uploaded
    untagged = TaggingApi()
    publish(root / "v2", "me/echo", api=untagged)
    assert [c[0] for c in untagged.calls] == ["create_repo", "upload_folder"]
    monkeypatch.setattr(huggingface_hub, "HfApi", TaggingApi)
    shown = CliRunner().invoke(
        cli, ["publish", str(root / "v2"), "--repo-id", "me/echo", "--token", "hf_x", "--version", "1.1.0"]
    )
    assert shown.exit_code == 0, shown.output
    assert "tagged v1.1.0" in shown.output and TaggingApi.calls[-1][2]["tag"] == "v1.1.0"


def _labels(path, items):
    path.mkdir()
    lines = [
        {"labeller": kind, "sample_id": sid, "status": "ok", "labels": [{"category": c} for c in cats]}
        for kind, sid, cats in items
    ]
    lines.append({"labeller": "failure", "sample_id": "s1", "status": "error", "labels": []})  # unlabelled
    (path / "labels.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    return path


def test_diff_of_constructed_versions_with_moves_and_category_shifts(tmp_path):
    from echo_dataset.writer import write_hub_folder

    def rows(*ids):
        return [{"id": i, "prompt": f"p {i}"} for i in ids]

    old = write_hub_folder(
        {"text_to_image": rows("s1", "s2", "s3"), "image_to_image": rows("s4"), "analysis": rows("s5")},
        tmp_path / "old",
        card_context={"version": "2.3.1"},
    )
    new = write_hub_folder(
        {"text_to_image": rows("s1", "s6"), "image_to_image": rows("s4", "s7", "s8"), "analysis": rows("s3")},
        tmp_path / "new",
        card_context={},
    )
    old_labels = _labels(
        tmp_path / "a_old",
        [("task", "s1", ["portrait"]), ("task", "s2", ["text"]), ("failure", "s4", ["color shift"])],
    )
    new_labels = _labels(
        tmp_path / "a_new",
        [("task", "s1", ["portrait"]), ("task", "s6", ["portrait"]), ("failure", "s4", ["identity"])],
    )
    both = ["--old-analysis", str(old_labels), "--new-analysis", str(new_labels)]
    result = CliRunner().invoke(cli, ["diff", str(old), str(new), *both, "--format", "json"])
    assert result.exit_code == 0, result.output
    diff = json.loads(result.output)
    assert diff["configs"] == {
        "image_to_image": {"old": 1, "new": 3, "added": ["s7", "s8"], "removed": []},
        "text_to_image": {"old": 3, "new": 2, "added": ["s6"], "removed": ["s2", "s3"]},
        "analysis": {"old": 1, "new": 1, "added": ["s3"], "removed": ["s5"]},
    }
    assert diff["moved"] == [{"id": "s3", "from": "text_to_image", "to": "analysis"}]
    assert diff["totals"] == {"old": 5, "new": 6, "added": 3, "removed": 2, "kept": 3}
    assert (diff["old"]["version"], diff["new"]["version"]) == ("2.3.1", None)
    tasks = {r["category"]: r for r in diff["task_shift"]}
    assert tasks["portrait"] == {
        "category": "portrait",
        "old": 1,
        "new": 2,
        "old_share": 0.5,
        "new_share": 1.0,
        "shift": 0.5,
    }
    assert tasks["text"]["shift"] == -0.5
    failures = {r["category"]: (r["old"], r["new"], r["shift"]) for r in diff["failure_shift"]}
    assert failures == {"color shift": (1, 0, -1.0), "identity": (0, 1, 1.0)}
    table = (
        CliRunner()
        .invoke(
            cli,
            [
                "diff",
                str(old),
                str(new),
                "--old-analysis",
                str(old_labels),
                "--new-analysis",
                str(new_labels),
            ],
        )
        .output
    )
    assert "moved: s3 text_to_image -> analysis" in table and "portrait" in table and "+0.500" in table
    lonely = CliRunner().invoke(cli, ["diff", str(old), str(new), "--old-analysis", str(old_labels)])
    assert lonely.exit_code == 2 and "go together" in lonely.output
    absent = CliRunner().invoke(cli, ["diff", str(old), str(tmp_path / "missing")])
    assert absent.exit_code == 1 and "does not exist" in absent.output
    assert "holds none of ECHO's configs" not in absent.output  # the reason, not a list of configs it lacks
    (tmp_path / "empty").mkdir()
    empty = CliRunner().invoke(cli, ["diff", str(old), str(tmp_path / "empty")])
    assert empty.exit_code == 1 and "holds none of ECHO's configs" in empty.output


def test_takedowns_without_previous_write_changes_but_no_version(versions, tmp_path):
    root, _ = versions
    takedowns = tmp_path / "t.txt"
    takedowns.write_text(f"{ID['A']}\n")
    out = tmp_path / "out"
    _build(root / "v1.jsonl", "--out", out, "--takedowns", takedowns)
    changes = json.loads((out / "changes.json").read_text())
    assert changes["withheld"] == [ID["A"]] and changes["version"] is None
    assert set(changes["added"]["analysis"]) == {ID[k] for k in "BCDE"}
    assert {r["id"] for r in read_config(out, "analysis")} == {ID[k] for k in "BCDE"}
    assert card_version(out) is None and "## Version" not in (out / "README.md").read_text()


def test_a_second_refresh_knows_the_posts_of_carried_rows(versions):
    root, _ = versions
    # A was carried into 1.1.0 (its posts are not in 1.1.0's stage files, only in its changes.json); the third
    # window reads A's post again, now irrelevant (its time is set a day on to keep the window [T0 + 1441 min]
    # clear of C), and G's post
    third = _write(root / "v3.jsonl", [_post(N["A"], 1441, relevant=False), _post(N["G"], 1441)])
    _build(third, "--out", root / "v3", "--previous", root / "v2")
    changes = json.loads((root / "v3" / "changes.json").read_text())
    assert changes["version"] == "1.2.0" and changes["previous"]["version"] == "1.1.0"
    assert changes["removed"] == [{"id": ID["A"], "config": "analysis", "reason": "filtered"}]
    assert changes["kept"] == {"analysis": [ID["G"]]} and changes["added"] == {}
    assert changes["carried"] == {"analysis": [ID["C"]]}  # posted at T0 + 6 min, before this window
    assert changes["carried_post_ids"] == {ID["C"]: [f"x:{N['C']}"]}
    same = CliRunner().invoke(
        cli, ["build", str(third), "--out", str(root / "v3"), "--previous", str(root / "v3")]
    )
    assert same.exit_code != 0 and "is the build folder itself" in same.output


def test_plan_refresh_reasons_one_by_one():
    from echo_builder.refresh import Previous, gone_post_ids, plan_refresh

    inside, before = "2025-03-26T12:00:00Z", "2025-03-01T00:00:00Z"
    previous = Previous(
        "old",
        {
            "text_to_image": {"kept": inside, "moved": inside, "marker": inside, "part": before},
            "analysis": {
                "gone": inside,
                "old": before,
                "unknown_in": inside,
                "unknown_out": "2025-03-01T00:00:00",
            },
        },
        {
            "kept": ("x:1",),
            "moved": ("x:2",),
            "marker": ("reddit:t3_a",),
            "part": ("x:3", "x:4"),
            "gone": ("x:5",),
            "old": ("x:6",),
        },
        "1.0.0",
    )
    posts = [SimpleNamespace(id="reddit:t3_a", text=" [Deleted] "), SimpleNamespace(id="x:3", text="hi")]
    plan = plan_refresh(
        previous,
        [
            ("kept", "text_to_image", ["x:1"]),
            ("moved", "analysis", ["x:2"]),
            ("new", "image_to_image", ["x:9"]),
        ],
        collected_post_ids=["x:1", "x:2", "x:3", "x:9", "reddit:t3_a"],
        gone_post_ids=gone_post_ids(posts),
        window=(datetime(2025, 3, 26, tzinfo=timezone.utc), datetime(2025, 3, 27, tzinfo=timezone.utc)),
        version="1.1.0",
    )
    c = plan.changes
    assert {r["id"]: r["reason"] for r in c["removed"]} == {
        "marker": "deleted",  # read again as Reddit's deletion marker
        "part": "deleted",  # x:3 read again, x:4 not
        "gone": "deleted",  # posted inside the window, not read again
        "unknown_in": "missing",  # inside the window, posts unknown
    }
    assert c["carried"] == {"analysis": ["old", "unknown_out"]}  # before the window (a naive time is UTC)
    assert c["kept"] == {"text_to_image": ["kept"], "analysis": ["moved"]}
    assert c["added"] == {"image_to_image": ["new"]}
    assert c["moved"] == [{"id": "moved", "from": "text_to_image", "to": "analysis"}]
    assert plan.keep_new == {"kept", "moved", "new"}
    assert c["carried_post_ids"] == {"old": ["x:6"]}


def test_echobench_refuses_a_refreshed_build(versions, tmp_path):
    from echo_dataset.builder import EchoBench

    root, _ = versions
    builder = EchoBench(config_name="analysis", data_dir=str(root / "v2"), cache_dir=str(tmp_path / "hf"))
    with pytest.raises(InvalidHubFolderError, match="refreshed build"):
        builder.download_and_prepare()


def test_an_unpseudonymized_previous_is_not_carried_into_a_pseudonymized_dataset(versions, tmp_path):
    root, _ = versions
    raw = tmp_path / "raw"
    _build(root / "v1.jsonl", "--out", raw, "--no-pseudonymize")
    refused = CliRunner().invoke(
        cli,
        [
            "build",
            str(root / "v2.jsonl"),
            "--out",
            str(tmp_path / "next"),
            "--offline",
            "--previous",
            str(raw),
        ],
    )
    assert (
        refused.exit_code != 0 and "--no-pseudonymize" in refused.output and not (tmp_path / "next").exists()
    )
    _build(root / "v2.jsonl", "--out", tmp_path / "next", "--previous", raw, "--no-pseudonymize")
