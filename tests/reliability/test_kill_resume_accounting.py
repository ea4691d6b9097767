"""What :func:`tests.helpers.kill_resume.resent_per_kill` charges to each kill, on scripted runs (no process).

The kill-and-resume trials assert that each kill costs at most ``concurrency`` repeated calls. The count once
charged every call ever sent and not stored to the latest kill, so a trial with two kills failed whenever the
resumed run sent the unanswered calls in another order than the killed run (the judge prepares images in a
thread pool: items reach the call slots in a slightly different order each run) and died before re-sending all
of them: the first kill's leftovers were added to the second kill's own in-flight calls.
"""

from __future__ import annotations

import pytest

from tests.helpers.kill_resume import resent_per_kill


def test_a_call_lost_at_the_first_kill_and_not_reached_before_the_second_is_charged_to_the_first():
    # concurrency 4; run 1 dies with a-d in flight; run 2 (nothing stored) sends a, e, d, b in that order and
    # dies with those four in flight, before reaching c; run 3 sends everything
    runs = [{"a", "b", "c", "d"}, {"a", "e", "d", "b"}, {"a", "b", "c", "d", "e", "f"}]
    assert resent_per_kill(runs, [set(), set()]) == [4, 4]
    # the former count (every call sent before kill 2 and not stored, sent again) charged kill 2 with five
    assert len((runs[0] | runs[1]) & runs[2]) == 5


def test_stored_calls_and_calls_never_sent_again_are_not_charged():
    runs = [{"a", "b", "c", "d", "e"}, {"d", "e", "f"}, {"f", "g"}]
    stored = [{"a", "b", "c"}, {"a", "b", "c", "d", "e"}]  # kill 1 lost d and e; kill 2 lost f
    assert resent_per_kill(runs, stored) == [2, 1]
    # a lost call the later runs never needed (e.g. a re-ask a fresh answer made unnecessary) cost nothing again
    assert resent_per_kill([{"a", "x"}, {"a"}], [set()]) == [1]


def test_a_call_lost_at_two_kills_counts_at_each():
    # each kill threw away a reply that was paid for: both are repeats
    assert resent_per_kill([{"a"}, {"a"}, {"a"}], [set(), set()]) == [1, 1]


def test_an_uninterrupted_run_has_no_kill_to_charge_and_a_wrong_length_is_refused():
    assert resent_per_kill([{"a", "b"}], []) == []
    with pytest.raises(ValueError, match="stored_after_kill needs 1 entries; got 2"):
        resent_per_kill([{"a"}, {"a"}], [set(), set()])
