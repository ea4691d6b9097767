"""The Space's ``requirements.txt`` installs on a Space: each line is a PEP 508 requirement that pip can resolve
without echo-bench being on PyPI (issue 15 item 4). Needs neither gradio nor the network."""

from __future__ import annotations

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.conftest import REPO_ROOT

SPACE_DIR = REPO_ROOT / "spaces_app"


def _project() -> dict:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        tomllib = pytest.importorskip("tomli")
    return tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def _published_names() -> set[str]:
    """Distributions the package itself depends on (core and extras): they come from PyPI."""
    project = _project()
    specs = list(project["dependencies"]) + [
        s for extra in project["optional-dependencies"].values() for s in extra
    ]
    return {canonicalize_name(Requirement(s).name) for s in specs}


def requirement_problems(text: str, project_name: str, version: str, published: set[str]) -> list[str]:
    """Why lines of a requirements file would not install on a Space (empty: all fine)."""
    problems = []
    lines = [raw.split(" #", 1)[0].strip() for raw in text.splitlines()]
    # a wheel shipped in the Space: `--find-links ./wheels` plus an exact pin
    find_links = any(line.startswith(("--find-links ", "-f ")) for line in lines)
    for number, line in enumerate(lines, 1):
        if not line or line.startswith("#") or line.startswith(("--find-links ", "-f ")):
            continue
        try:
            req = Requirement(line)
        except Exception as exc:  # packaging's InvalidRequirement
            problems.append(f"line {number}: not a PEP 508 requirement ({exc})")
            continue
        name = canonicalize_name(req.name)
        if name == canonicalize_name(project_name):
            url = req.url or ""
            pinned_git = url.startswith("git+https://") and url.rsplit("/", 1)[-1].endswith(f"@v{version}")
            wheel = url.startswith("https://") and url.endswith(".whl")
            shipped = find_links and not url and str(req.specifier) == f"=={version}"
            if not (pinned_git or wheel or shipped):
                problems.append(
                    f"line {number}: {project_name} is not on PyPI: install it from git+https://...@v{version} or a "
                    f"wheel URL, not {line!r}"
                )
        elif req.url is None and name not in published:
            problems.append(f"line {number}: {req.name} is not a dependency of the package (is it on PyPI?)")
    return problems


def test_every_line_installs_on_a_space() -> None:
    project = _project()
    text = (SPACE_DIR / "requirements.txt").read_text(encoding="utf-8")
    assert requirement_problems(text, project["name"], project["version"], _published_names()) == []
    reqs = {
        r.name: r for r in (Requirement(x) for x in text.splitlines() if x.strip() and not x.startswith("#"))
    }
    assert {"space", "faces"} <= reqs["echo-bench"].extras and "gradio" in reqs


def test_the_check_refuses_a_bare_unpublished_name() -> None:
    published = {"gradio"}
    assert requirement_problems("echo-bench[space]>=0.1\n", "echo-bench", "0.1.0", published)
    assert requirement_problems(
        "echo-bench @ git+https://github.com/o/echo-bench\n", "echo-bench", "0.1.0", published
    )
    assert requirement_problems(
        "echo-bench @ git+https://github.com/o/echo-bench@v0.0.9\n", "echo-bench", "0.1.0", published
    )
    assert requirement_problems("not a requirement!\n", "echo-bench", "0.1.0", published)
    assert requirement_problems("made-up-pkg\n", "echo-bench", "0.1.0", published)
    good = "# c\n\necho-bench[space] @ git+https://github.com/o/echo-bench@v0.1.0\ngradio>=6  # ui\n"
    assert requirement_problems(good, "echo-bench", "0.1.0", published) == []
    wheel = "echo-bench @ https://example.org/echo_bench-0.1.0-py3-none-any.whl\n"
    assert requirement_problems(wheel, "echo-bench", "0.1.0", published) == []
    shipped = "--find-links ./wheels\necho-bench[space]==0.1.0\n"
    assert requirement_problems(shipped, "echo-bench", "0.1.0", published) == []
    assert requirement_problems("echo-bench[space]==0.1.0\n", "echo-bench", "0.1.0", published)


def test_the_readme_says_how_to_deploy() -> None:
    text = (SPACE_DIR / "README.md").read_text(encoding="utf-8")
    assert "## Deploy to a Space" in text and "OWNER" in text and "--find-links" in text
