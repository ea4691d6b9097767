"""Property-based tests (hypothesis) of the pure parts, each against an independent simple formulation.

- reply-tree reconstruction: on random forests with missing parents, self-replies, duplicate records, duplicate
  URLs and reply cycles, every post lands in at most one tree, every kept post in exactly one, each tree is a
  rooted tree (no cycle, nothing reached twice, only real reply links); without cycles the trees equal those of
  a naive walk to the root, and parents come before their children;
- id determinism: sample ids do not depend on the order posts arrive in, post ids round-trip;
- win rates and Bradley-Terry: relabelling models relabels the results, a model that loses everything comes last
  without moving the others (Bradley-Terry: in the limit of a vanishing prior, exactly), and the whole judge
  ensemble (ratings -> pseudo-pairwise -> majority vote -> win rates) equals a brute-force count and does not
  depend on the judges' names or order;
- color shift: equal to a brute-force mean over the kept pixels, symmetric in its two images (deltas change
  sign), invariant under integer nearest-neighbour upscaling of either image.
"""

from __future__ import annotations

import itertools
import math
import random
from datetime import datetime, timedelta, timezone

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from echo_builder.errors import RecordError
from echo_builder.ids import PLATFORMS, make_post_id, sample_id, split_post_id
from echo_builder.records import Post
from echo_builder.scoring.color import color_shift
from echo_builder.stages.extract import run_extract
from echo_builder.stages.threads import build_trees
from echo_builder.stats import bradley_terry, majority_vote, pseudo_pairwise, win_rates
from tests.helpers.properties import examples

T0 = datetime(2025, 3, 27, tzinfo=timezone.utc)
# modest example counts keep the whole module under ~20 s on a loaded 2-core machine
FAST = settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
FEWER = settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ------------------------------------------------------------------------------------------ reply trees
def _post(
    i: int, parent: str | None, *, url: int | None = None, minutes: int | None = None, text: str = ""
) -> Post:
    return Post(
        id=f"x:{i}",
        platform="x",
        url=f"https://x.com/u/status/{url if url is not None else i}",
        author_id=str(i % 3),
        created_at=T0 + timedelta(minutes=minutes if minutes is not None else i),
        text=text or f"post {i}",
        reply_to_id=parent,
    )


@st.composite
def hostile_forests(draw):
    """(kept, all_posts): parents anywhere (cycles), missing, self; repeated records and repeated URLs."""
    n = draw(st.integers(1, 12))
    posts = []
    for i in range(n):
        kind = draw(st.sampled_from(["none", "any", "missing", "self"]))
        parent = {
            "none": None,
            "any": f"x:{draw(st.integers(0, n - 1))}",
            "missing": f"x:gone{draw(st.integers(0, 2))}",
            "self": f"x:{i}",
        }[kind]
        posts.append(_post(i, parent, minutes=draw(st.integers(0, 30))))
    extra = []
    for _ in range(draw(st.integers(0, 3))):  # the same record again, with another parent (first one wins)
        j = draw(st.integers(0, n - 1))
        extra.append(posts[j].model_copy(update={"reply_to_id": f"x:{draw(st.integers(0, n - 1))}"}))
    for k in range(draw(st.integers(0, 2))):  # another id for a post already collected: same URL
        j = draw(st.integers(0, n - 1))
        extra.append(_post(100 + k, posts[j].reply_to_id, url=j))
    everything = posts + extra
    order = draw(st.permutations(range(len(everything))))
    all_posts = [everything[i] for i in order]
    kept = draw(st.lists(st.sampled_from(everything), min_size=1, max_size=len(everything)))
    return kept, all_posts


def _walk_tree(tree) -> list[str]:
    """Posts reached from the root through ``children``, depth first; a post reached twice is listed twice."""
    reached, stack = [], [tree.root_id]
    while stack:
        pid = stack.pop()
        reached.append(pid)
        if len(reached) > 10 * len(tree.posts):  # a cycle in the edges
            break
        stack.extend(reversed(tree.children.get(pid, ())))
    return reached


@FEWER
@given(hostile_forests())
def test_trees_are_rooted_and_every_post_is_in_one_place(forest):
    kept, all_posts = forest
    result = build_trees(kept, all_posts, max_depth=50, max_size=1000)
    placed = [p.id for tree in result.trees for p in tree.posts]
    assert len(placed) == len(set(placed)), "a post is in two trees"
    urls = {p.id: p.url for tree in result.trees for p in tree.posts}
    for post in kept:  # merged duplicates are found through their URL
        assert post.id in urls or post.url in urls.values(), f"kept post {post.id} is in no tree"
    first: dict[str, Post] = {}
    for post in [*kept, *all_posts]:
        first.setdefault(post.id, post)  # the record that counts for each id
    for tree in result.trees:
        ids = {p.id for p in tree.posts}
        reached = _walk_tree(tree)
        assert sorted(reached) == sorted(ids), "the edges do not form a tree over the posts (cycle or orphan)"
        assert tree.root_id not in {c for kids in tree.children.values() for c in kids}
        for parent, kids in tree.children.items():
            for child in kids:  # only real reply links: the child names this parent, or a record with its URL
                up = tree.post(child).reply_to_id
                assert up == parent or (up in first and first[up].url == tree.post(parent).url)
        assert not set(tree.missing_ids) & ids
        assert set(tree.seed_ids) <= ids
    assert result.cycles_broken >= 0 and result.missing_parents == sum(
        len(t.missing_ids) for t in result.trees
    )


@st.composite
def acyclic_forests(draw):
    """Posts whose parent is an earlier post, a missing id, itself or nothing; times increase along replies."""
    n = draw(st.integers(1, 14))
    posts = []
    for i in range(n):
        kind = draw(st.sampled_from(["none", "earlier", "earlier", "missing", "self"]))
        if kind == "earlier" and i > 0:
            parent = f"x:{draw(st.integers(0, i - 1))}"
        elif kind == "missing":
            parent = f"x:gone{i}"
        elif kind == "self":
            parent = f"x:{i}"
        else:
            parent = None
        posts.append(_post(i, parent))
    kept = draw(st.lists(st.sampled_from(posts), min_size=1, max_size=n, unique_by=lambda p: p.id))
    order = draw(st.permutations(range(n)))
    return kept, [posts[i] for i in order]


def _naive_trees(kept, all_posts):
    """Independent formulation: walk each post up to its root; a tree is a kept post's root and every post whose
    walk ends there."""
    by_id = {p.id: p for p in all_posts}

    def parent(p):
        up = p.reply_to_id
        return up if up in by_id and up != p.id else None

    def root(p):
        while parent(p) is not None:
            p = by_id[parent(p)]
        return p.id

    roots = {root(k) for k in kept}
    trees = {}
    for r in roots:
        up = by_id[r].reply_to_id
        trees[r] = {
            "posts": {p.id for p in all_posts if root(p) == r},
            "missing": [up] if up is not None and up not in by_id else [],
            "seeds": sorted(k.id for k in kept if root(k) == r),
        }
    return trees


@FAST
@given(acyclic_forests())
def test_trees_without_cycles_equal_a_naive_walk_to_the_root(forest):
    kept, all_posts = forest
    result = build_trees(kept, all_posts, max_depth=50, max_size=1000)
    expected = _naive_trees(kept, all_posts)
    got = {
        t.root_id: {
            "posts": {p.id for p in t.posts},
            "missing": list(t.missing_ids),
            "seeds": list(t.seed_ids),
        }
        for t in result.trees
    }
    assert got == expected
    assert result.cycles_broken == 0
    for tree in result.trees:  # root first, then creation order: a parent is always listed before its replies
        position = {p.id: i for i, p in enumerate(tree.posts)}
        assert position[tree.root_id] == 0
        for parent, kids in tree.children.items():
            assert all(position[parent] < position[k] for k in kids)


# ------------------------------------------------------------------------------------------------------ ids
_native = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=20).filter(
    lambda s: s.strip() == s and s
)


@FAST
@given(st.sampled_from(sorted(PLATFORMS)), _native)
def test_post_ids_round_trip(platform, native):
    post_id = make_post_id(platform, native)
    assert post_id == f"{platform}:{native}"
    assert split_post_id(post_id) == (platform, native)


@FAST
@given(st.lists(st.tuples(st.sampled_from(sorted(PLATFORMS)), _native), min_size=1, max_size=6), st.randoms())
def test_sample_ids_do_not_depend_on_order_or_repeats(pairs, rnd):
    ids = [make_post_id(p, n) for p, n in pairs]
    shuffled = ids + rnd.sample(ids, k=min(2, len(ids)))
    rnd.shuffle(shuffled)
    sid = sample_id(ids)
    assert sid == sample_id(shuffled)
    assert sid.startswith("echo-") and len(sid) == 21 and int(sid[5:], 16) >= 0
    assert sample_id(ids, salt="1") != sid
    others = set(ids) - {ids[0]}
    if others:  # a different set of posts is a different sample
        assert sample_id(others) != sid


@settings(max_examples=examples(30), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(acyclic_forests(), st.randoms())
def test_rules_extraction_gives_the_same_sample_ids_whatever_the_arrival_order(forest, rnd):
    kept, all_posts = forest
    texts = ["GPT-4o. Prompt: a cat in a hat", "looks great", "Prompt below", "wrong colors", "hello"]
    relabelled = [p.model_copy(update={"text": texts[int(p.id[2:]) % len(texts)]}) for p in all_posts]
    kept = [next(q for q in relabelled if q.id == k.id) for k in kept]

    def ids(kept_posts, posts):
        trees = build_trees(kept_posts, posts, max_depth=50, max_size=1000).trees
        return [s.id for s in run_extract(trees, target_model="GPT-4o").samples]

    first = ids(kept, relabelled)
    assert ids(rnd.sample(kept, len(kept)), rnd.sample(relabelled, len(relabelled))) == first
    assert len(first) == len(set(first))


# ------------------------------------------------------------------------------------ win rates, Bradley-Terry
_names = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=8)


@st.composite
def comparisons(draw, min_models=2, max_models=5):
    n = draw(st.integers(min_models, max_models))
    models = [f"m{i}" for i in range(n)]
    rows = []
    for k in range(draw(st.integers(1, 25))):
        a, b = draw(st.permutations(models))[:2]
        rows.append(
            (f"s{k}", draw(st.sampled_from(["j1", "j2"])), a, b, draw(st.sampled_from([0.0, 0.5, 1.0])))
        )
    return pd.DataFrame(rows, columns=["sample_id", "judge", "model_a", "model_b", "outcome"])


def _count(table: pd.DataFrame) -> dict[str, float]:
    """Brute force: every row gives model_a its outcome and model_b one minus it."""
    points, games = {}, {}
    for row in table.itertuples(index=False):
        for model, p in ((row.model_a, row.outcome), (row.model_b, 1.0 - row.outcome)):
            points[model] = points.get(model, 0.0) + p
            games[model] = games.get(model, 0) + 1
    return {m: points[m] / games[m] for m in points}


def _relabel(table: pd.DataFrame, mapping: dict[str, str]) -> pd.DataFrame:
    return table.assign(model_a=table["model_a"].map(mapping), model_b=table["model_b"].map(mapping))


@FAST
@given(comparisons(), st.lists(_names, min_size=5, max_size=5, unique=True), st.randoms())
def test_win_rates_follow_their_models_under_any_relabelling(table, names, rnd):
    models = sorted(set(table["model_a"]) | set(table["model_b"]))
    mapping = dict(zip(models, rnd.sample(names, len(models)), strict=False))
    renamed = _relabel(table, mapping).sample(frac=1.0, random_state=rnd.randint(0, 10**6))
    got = win_rates(renamed).set_index("model")["win_rate"].to_dict()
    assert got == pytest.approx({mapping[m]: v for m, v in _count(table).items()}, abs=1e-12)


@FEWER
@given(comparisons(), st.integers(1, 3))
def test_a_model_that_loses_everything_comes_last_in_win_rates(table, games):
    models = sorted(set(table["model_a"]) | set(table["model_b"]))
    loser = [(f"l{m}{g}", "j1", m, "zz-loser", 1.0) for m in models for g in range(games)]
    after = win_rates(pd.concat([table, pd.DataFrame(loser, columns=table.columns)], ignore_index=True))
    rates = after.set_index("model")
    assert rates.loc["zz-loser", "win_rate"] == 0.0 and rates.loc["zz-loser", "losses"] == games * len(models)
    assert after["model"].iloc[-1] == "zz-loser" or after["win_rate"].iloc[-1] == 0.0
    before = win_rates(table).set_index("model")
    for m in models:  # exactly `games` more wins and games each, nothing else changes
        assert rates.loc[m, "wins"] == before.loc[m, "wins"] + games
        assert rates.loc[m, "n_comparisons"] == before.loc[m, "n_comparisons"] + games


@FAST
@given(
    comparisons(min_models=2, max_models=4),
    st.lists(_names, min_size=4, max_size=4, unique=True),
    st.randoms(),
)
def test_bradley_terry_ratings_follow_their_models_under_relabelling(table, names, rnd):
    models = sorted(set(table["model_a"]) | set(table["model_b"]))
    mapping = dict(zip(models, rnd.sample(names, len(models)), strict=False))
    base = bradley_terry(table, prior=0.5).set_index("model")["rating"].to_dict()
    renamed = _relabel(table, mapping).sample(frac=1.0, random_state=rnd.randint(0, 10**6))
    got = bradley_terry(renamed, prior=0.5).set_index("model")["rating"].to_dict()
    assert got == pytest.approx({mapping[m]: r for m, r in base.items()}, abs=1e-6)


@st.composite
def connected_comparisons(draw):
    """Comparisons whose plain Bradley-Terry MLE exists: a cycle of wins through all models, plus random games."""
    n = draw(st.integers(2, 4))
    models = [f"m{i}" for i in range(n)]
    rows = [(f"c{i}", "j", models[i], models[(i + 1) % n], 1.0) for i in range(n)]
    if n == 2:
        rows.append(("c2", "j", "m1", "m0", 1.0))
    for k in range(draw(st.integers(0, 12))):
        a, b = draw(st.permutations(models))[:2]
        rows.append((f"r{k}", "j", a, b, draw(st.sampled_from([0.0, 0.5, 1.0]))))
    return pd.DataFrame(rows, columns=["sample_id", "judge", "model_a", "model_b", "outcome"])


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(connected_comparisons(), st.integers(1, 3))
def test_a_model_that_loses_everything_does_not_move_the_others_in_bradley_terry(table, games):
    base = bradley_terry(table).set_index("model")["rating"]
    models = sorted(base.index)
    loser = [(f"l{m}{g}", "j", m, "zz-loser", 1.0) for m in models for g in range(games)]
    with_loser = pd.concat([table, pd.DataFrame(loser, columns=table.columns)], ignore_index=True)
    with pytest.raises(RecordError, match="MLE does not exist"):  # its rating would be minus infinity
        bradley_terry(with_loser)
    # with a vanishing prior the loser is rated far below everyone, and the others' gaps are those without it
    after = bradley_terry(with_loser, prior=1e-5).set_index("model")["rating"]
    assert after["zz-loser"] < after[models].min() - 400
    for a, b in itertools.combinations(models, 2):
        assert after[a] - after[b] == pytest.approx(base[a] - base[b], abs=0.01)  # measured: <= 0.001


@st.composite
def ratings(draw):
    """Single-answer ratings: every (sample, model, judge) once; some missing outputs and judge failures."""
    n_models, n_judges, n_samples = draw(st.integers(2, 4)), draw(st.integers(1, 4)), draw(st.integers(1, 4))
    rows = []
    for s, m, j in itertools.product(range(n_samples), range(n_models), range(n_judges)):
        status = draw(st.sampled_from(["ok", "ok", "ok", "ok", "missing_output", "error", "parse_failure"]))
        rating = float(draw(st.integers(1, 10))) if status == "ok" else math.nan
        rows.append((f"s{s}", f"m{m}", f"j{j}", rating, status))
    return pd.DataFrame(rows, columns=["sample_id", "model", "judge", "rating", "status"])


def _ensemble_by_hand(table: pd.DataFrame) -> dict[str, float]:
    """Brute force of ECHO's ensemble: per sample and pair each judge votes (higher rating wins, a missing output
    loses, two missing tie, a failed judgment abstains); a strict majority of the voters decides, else a tie."""
    cells = {(r.sample_id, r.model, r.judge): (r.status, r.rating) for r in table.itertuples(index=False)}
    samples, models = sorted(set(table["sample_id"])), sorted(set(table["model"]))
    judges = sorted(set(table["judge"]))
    points: dict[str, list[float]] = {}
    for s in samples:
        for a, b in itertools.combinations(models, 2):
            votes = []
            for j in judges:
                (sa, ra), (sb, rb) = cells[(s, a, j)], cells[(s, b, j)]
                if sa not in ("ok", "missing_output") or sb not in ("ok", "missing_output"):
                    continue
                if sa == sb == "missing_output":
                    votes.append(0.5)
                elif sa == "missing_output" or sb == "missing_output":
                    votes.append(0.0 if sa == "missing_output" else 1.0)
                else:
                    votes.append(1.0 if ra > rb else 0.0 if ra < rb else 0.5)
            if not votes:
                continue
            outcome = (
                1.0
                if votes.count(1.0) * 2 > len(votes)
                else 0.0
                if votes.count(0.0) * 2 > len(votes)
                else 0.5
            )
            points.setdefault(a, []).append(outcome)
            points.setdefault(b, []).append(1.0 - outcome)
    return {m: sum(p) / len(p) for m, p in points.items()}


@FEWER
@given(ratings(), st.randoms())
def test_the_judge_ensemble_equals_a_brute_force_count_whatever_the_judges_order(table, rnd):
    def pipeline(t: pd.DataFrame) -> pd.DataFrame:
        comps = pseudo_pairwise(t)
        if comps.empty:
            return pd.DataFrame(columns=["model", "win_rate"])
        return win_rates(majority_vote(comps))

    base = pipeline(table)
    expected = _ensemble_by_hand(table)
    assert base.set_index("model")["win_rate"].to_dict() == pytest.approx(expected, abs=1e-12)
    judges = sorted(set(table["judge"]))
    mapping = dict(zip(judges, rnd.sample([f"judge-{k}" for k in range(10)], len(judges)), strict=True))
    shuffled = table.assign(judge=table["judge"].map(mapping)).sample(
        frac=1.0, random_state=rnd.randint(0, 10**6)
    )
    pd.testing.assert_frame_equal(pipeline(shuffled), base)


# ------------------------------------------------------------------------------------------------- color shift
_image = st.tuples(st.integers(1, 6), st.integers(1, 6)).flatmap(
    lambda hw: arrays(np.uint8, (*hw, 3), elements=st.integers(0, 255))
)


def _brute_force_shift(a: np.ndarray, b: np.ndarray) -> float:
    """Mean level per channel over the pixels with levels 5..250, then the Euclidean distance; NaN if undefined."""
    means = []
    for img in (a, b):
        channel_means = []
        for c in range(3):
            kept = [int(v) for v in img[..., c].ravel() if 5 <= v <= 250]
            channel_means.append(sum(kept) / len(kept) if kept else math.nan)
        means.append(channel_means)
    return math.sqrt(sum((y - x) ** 2 for x, y in zip(*means, strict=True)))


@settings(max_examples=examples(80), deadline=None)
@given(_image, _image, st.integers(1, 3), st.integers(1, 3))
def test_color_shift_is_a_symmetric_distance_invariant_to_upscaling(a, b, k, m):
    expected = _brute_force_shift(a, b)
    forward = color_shift([a], [b])
    value = float(forward.values[0])
    if math.isnan(expected):
        assert math.isnan(value) and forward.nan_reasons[0] is not None
        return
    assert value == pytest.approx(expected, abs=1e-9)
    backward = color_shift([b], [a])
    assert float(backward.values[0]) == pytest.approx(value, abs=1e-9)  # symmetric in its two images
    np.testing.assert_allclose(backward.extras["deltas"][0], -forward.extras["deltas"][0], atol=1e-9)
    scaled = np.repeat(
        np.repeat(a, k, axis=0), m, axis=1
    )  # nearest-neighbour upscaling: same histogram shape
    assert float(color_shift([scaled], [b]).values[0]) == pytest.approx(value, abs=1e-9)
    shuffled = a.reshape(-1, 3)[
        random.Random(k * 7 + m).sample(range(a.shape[0] * a.shape[1]), a.shape[0] * a.shape[1])
    ]
    assert float(color_shift([shuffled.reshape(a.shape)], [b]).values[0]) == pytest.approx(value, abs=1e-9)
