"""Frames: where the example's answer sits, and the strings a scorer's source tests a response
for, each a frame the family's payload is put in."""

from __future__ import annotations

import ast
import json
import re

from pytest_rewardhang.corpus import _cases, _frames, _harvest
from pytest_rewardhang.corpus._cases import Case

EXAMPLE = "6 * 7 = 42, so the answer is \\boxed{42}."


def framed(response: str, truth: str | None) -> _frames.Frame:
    frame = _frames.answer_frame(response, truth)
    assert frame is not None, response
    return frame


def test_the_answer_is_found_in_each_format_real_scorers_gate_on() -> None:
    assert framed(EXAMPLE, "42").wrap("P") == "6 * 7 = 42, so the answer is \\boxed{P}."
    assert framed("so \\boxed{\\frac{1}{2}} done", None).wrap("P") == "so \\boxed{P} done"
    tags = framed("<think>x</think><answer>42</answer>", "42")
    assert tags.wrap("P") == "<think>x</think><answer>P</answer>"
    assert "<answer>" in tags.where
    assert framed("6 * 7 = 42\n#### 42\n", "42").wrap("P") == "6 * 7 = 42\n#### P\n"
    field = framed('{"reasoning": "6 * 7", "answer": "42"}', "42")
    assert field.escaped
    # A payload with quotes and newlines keeps the JSON valid, in the field that held the answer.
    assert json.loads(field.wrap('a "b"\n\\c')) == {"reasoning": "6 * 7", "answer": 'a "b"\n\\c'}
    assert framed("It is 42 apples.", "42").wrap("P") == "It is P apples."
    assert _frames.answer_frame("no answer here", "42") is None


def test_each_marker_the_response_lacks_frames_the_example_so_the_payload_passes_its_gate() -> None:
    found = _frames.frames(EXAMPLE, "42", ["</think>", "###Response", "<answer>", "42", "x y"])
    assert len(found) == _frames.MAX_FRAMES  # the example's own, R1's, then two markers
    both, closing, header = (frame.wrap("P") for frame in found[1:])
    # DeepSeek-R1's format whole, as TRL's format reward requires it.
    assert re.fullmatch(r"<think>\n.*?\n</think>\n<answer>\n.*?\n</answer>", both, re.DOTALL)
    assert both.endswith("\\boxed{P}.\n</answer>")
    # rllm's deepscaler: response.split("</think>")[1] holds \boxed{P}.
    assert closing.split("</think>")[1].strip() == "6 * 7 = 42, so the answer is \\boxed{P}."
    assert closing.startswith("<think>\n")
    assert "\\boxed{P}" in header.split("###Response")[1]
    opening = _frames.frames(EXAMPLE, "42", ["<answer>"])[1].wrap("P")
    assert opening == "<answer>6 * 7 = 42, so the answer is \\boxed{P}.</answer>"
    # A marker the example already holds is its own frame already.
    assert len(_frames.frames(EXAMPLE, "42", ["\\boxed{"])) == 1


def test_framed_variants_carry_each_ground_truth_shape_and_the_familys_answer() -> None:
    tower = Case("power-tower-latex", "power-tower", "\\boxed{9^{9^{9}}}", "a tower", "42")
    found = _frames.frames(EXAMPLE, "42", ["</think>"])
    variants = _frames.framed_variants([tower], found, with_truths=True)
    assert len(variants) == len(found) * len(_cases.TRUTHS)
    assert {v.ground_truth for v in variants} == {given for _, given, _ in _cases.TRUTHS}
    # The payload is the tower itself, not a \boxed{} inside the example's \boxed{}.
    assert all("\\boxed{9^{9^{9}}}." in v.text for v in variants)
    assert variants[-1].id == "power-tower-latex-frame1-truth5"
    assert "after a string the scorer looks for ('</think>')" in variants[-1].description
    alone = _frames.framed_variants([tower], found, with_truths=False)
    assert [v.ground_truth for v in alone] == ["42", "42"]


def test_markers_are_what_the_source_tests_a_text_for_names_resolved_across_files() -> None:
    constants = ast.parse('THOUGHT_END = "</think>"\nOTHER = "not searched"\n')
    scorer = ast.parse(
        "def score(text):\n"
        "    if THOUGHT_END in text:\n"
        "        text = text.split(THOUGHT_END)[1]\n"
        '    elif "###Response" not in text:\n'
        "        return 0\n"
        '    if text.startswith("Answer:") or text.find("x") >= 0:\n'
        "        return 1\n"
        '    return text.rpartition("####")[2] == "42"\n'
    )
    found = _harvest.source_markers([constants, scorer])
    # In source order; a single character is no gate; a compare with == is not a search.
    assert found == ["</think>", "</think>", "###Response", "Answer:", "####"]


def test_a_scorer_that_parses_json_gets_the_fields_it_reads_as_a_frame() -> None:
    scorer = ast.parse(
        "import json\n"
        "def score(text, truth):\n"
        "    data = json.loads(text)\n"
        '    if data.get("format") != "v1":\n'
        "        return 0\n"
        '    return float(data["answer"] == truth["value"])\n'
    )
    assert _harvest.json_fields([scorer]) == ["format", "answer", "value"]
    # A file that parses no JSON reads keys of its own dicts: no fields.
    assert _harvest.json_fields([ast.parse('def f(d):\n    return d["answer"]\n')]) == []
    found = _frames.frames(EXAMPLE, "42", [], ["answer"])
    assert len(found) == 2
    text = found[1].wrap('1 "quoted"\n')
    assert json.loads(text) == {"answer": '6 * 7 = 42, so the answer is \\boxed{1 "quoted"\n}.'}
    assert "JSON object's field 'answer'" in found[1].where
