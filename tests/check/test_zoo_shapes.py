"""Shapes the reward functions of registry packages have, which the check must call right."""

from __future__ import annotations

from pytest_rewardhang.check import _calls


def test_a_response_named_answer_is_never_replaced_by_a_cases_ground_truth() -> None:
    """reasoning-gym's ``score_answer(answer, entry)`` (``response=answer``): a case's ground
    truth goes nowhere, rather than over the response, which would score the truth instead."""
    info = _calls.ScorerInfo(
        *_calls.call_style(("answer", "entry"), "answer"), ("answer", "entry"), None, None
    )
    example = {"answer": "42", "entry": {"answer": "42", "metadata": {}}}
    kwargs = _calls.with_case(info, example, "math", "1" * 5000)
    assert _calls.with_truth(info, kwargs, "7") == kwargs
    assert kwargs["answer"] == "1" * 5000
    # verifiers' verify_boxed_math_answer(response, answer): there it is the truth's place.
    info = _calls.ScorerInfo(
        *_calls.call_style(("response", "answer"), None), ("response", "answer"), None, None
    )
    kwargs = _calls.with_case(info, {"response": "x", "answer": "42"}, "math", "RESPONSE")
    assert _calls.with_truth(info, kwargs, "7") == {"response": "RESPONSE", "answer": "7"}


def test_trls_length_rewards_with_completion_ids_are_called_as_trl() -> None:
    """TRL's ``get_cosine_scaled_reward`` makes ``(completions, solution, completion_ids)``:
    TRL passes ``completion_ids`` to every reward function; AReaL's signature has ``prompt``
    and ``prompt_ids`` besides, and its ``completions`` is one string."""
    assert _calls.call_style(("completions", "solution", "completion_ids", "kwargs"), None) == (
        "trl",
        "completions",
    )
    areal = ("prompt", "completions", "prompt_ids", "completion_ids", "answer", "kwargs")
    assert _calls.call_style(areal, None) == ("areal", "completions")


def test_a_response_that_is_a_list_of_generations_stays_a_list() -> None:
    """lm-eval's ``process_results(doc, results)`` reads ``results[0]``: given the case as a bare
    string, it would score one character and every case would pass in no time."""
    params = ("doc", "results")
    info = _calls.ScorerInfo(*_calls.call_style(params, "results"), params, None, None)
    example = {"doc": {"answer": "42"}, "results": ["The answer is $\\boxed{42}$."]}
    kwargs = _calls.with_case(info, example, "math", "9" * 4096)
    assert kwargs == {"doc": {"answer": "42"}, "results": ["9" * 4096]}
    assert _calls.response_length(kwargs["results"]) == 4096
