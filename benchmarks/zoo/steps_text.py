"""Text metrics as rewards (summaries, translations, free-form answers): the one step each
needs, its scorer made once at import, and the metric turned into a score the way reward
functions that use them do (TRL's and verl's users write these as custom rewards)."""

from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu
from rouge_score.rouge_scorer import RougeScorer
from sacrebleu.metrics import BLEU, CHRF, TER

_ROUGE = RougeScorer(["rougeL", "rougeLsum"], use_stemmer=True)
_BLEU = BLEU(effective_order=True)
_CHRF = CHRF()
_TER = TER()
_SMOOTH = SmoothingFunction().method1


def rouge_l(solution_str: str, ground_truth: str) -> float:
    return float(_ROUGE.score(ground_truth, solution_str)["rougeL"].fmeasure)


def rouge_lsum(solution_str: str, ground_truth: str) -> float:
    return float(_ROUGE.score(ground_truth, solution_str)["rougeLsum"].fmeasure)


def sacrebleu_bleu(solution_str: str, ground_truth: str) -> float:
    return float(_BLEU.sentence_score(solution_str, [ground_truth]).score) / 100


def sacrebleu_chrf(solution_str: str, ground_truth: str) -> float:
    return float(_CHRF.sentence_score(solution_str, [ground_truth]).score) / 100


def sacrebleu_ter(solution_str: str, ground_truth: str) -> float:
    # TER is an edit rate (lower is better): the reward is one minus it, floored at 0.
    return max(0.0, 1.0 - float(_TER.sentence_score(solution_str, [ground_truth]).score) / 100)


def nltk_bleu(solution_str: str, ground_truth: str) -> float:
    return float(
        sentence_bleu([ground_truth.split()], solution_str.split(), smoothing_function=_SMOOTH)
    )
