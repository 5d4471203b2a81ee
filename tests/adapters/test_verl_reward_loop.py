"""verl 0.9.1's own ``RewardLoopManager`` on a local Ray cluster: two ``RewardLoopWorker``
actors (each a process of its own), the verl adapter's file as the custom reward function
(loaded by verl's ``get_custom_reward_fn`` with its ``reward_kwargs``), scoring with a dict
scorer (math_dapo's ``{"score", "acc", "pred"}``) whose one sample in the second worker crashes
before any answer there. ``compute_rm_score`` makes a column of each key of the first sample's
``reward_extra_info`` and indexes every sample with it
(verl/experimental/reward_loop/reward_loop.py:343-376 of the 0.9.1 wheel): without the shape
known in that worker's process, the crashed sample's bare default is ``KeyError: 'score'``;
with a ``warmup`` or a dict ``default``, the step goes on.

A subprocess (verl, torch and Ray warn as they import, which this suite's ``filterwarnings =
error`` would turn into failures), with verl installed without its training dependencies
(.ci/run: ``pip install --no-deps verl==0.9.1`` beside the ``verl`` extra).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.needs_extra("verl"),
    pytest.mark.needs_extra("ray"),
    pytest.mark.needs_extra("trl"),  # torch and transformers
    pytest.mark.timeout(600),
]

SCORER = textwrap.dedent(
    """
    import os, signal

    def compute_score(data_source, solution_str, ground_truth, extra_info=None):
        if "crash" in solution_str:
            os.kill(os.getpid(), signal.SIGKILL)
        ok = float(solution_str.strip().endswith(ground_truth))
        return {"score": ok, "acc": ok > 0, "pred": solution_str[-4:]}
    """
)

STEP = textwrap.dedent(
    """
    import json, sys
    import numpy as np, ray, torch
    from omegaconf import OmegaConf
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    import pytest_rewardhang.adapters.verl as adapter
    from verl import DataProto
    from verl.experimental.reward_loop.reward_loop import RewardLoopManager

    here, root, cases = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    words = ["[PAD]", "[UNK]", "<eos>", "so", "42", "7", "crash"]
    vocab = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    vocab.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=vocab, pad_token="[PAD]", eos_token="<eos>", unk_token="[UNK]"
    )
    tok.save_pretrained(f"{here}/tok")
    def config(kwargs):
        return OmegaConf.create({
            "actor_rollout_ref": {
                "model": {"tokenizer_path": f"{here}/tok", "path": f"{here}/tok"},
            },
            "reward": {
                "num_workers": 2,
                "reward_model": {"enable": False},
                "reward_manager": {"name": "naive", "source": "register", "module": None},
                "custom_reward_function": {
                    "path": adapter.__file__, "name": "compute_score_async",
                    "reward_kwargs": kwargs,
                },
            },
        })
    texts = ["so 42", "crash"]  # one sample per worker: the second worker's first one crashes
    ids = [tok(t)["input_ids"] for t in texts]
    width = max(map(len, ids))
    responses = torch.tensor([i + [0] * (width - len(i)) for i in ids])
    prompts = torch.ones((len(texts), 2), dtype=torch.long)
    mask = torch.cat([torch.ones_like(prompts), (responses != 0).long()], dim=1)
    data = DataProto.from_dict(
        tensors={"responses": responses, "prompts": prompts, "attention_mask": mask},
        non_tensors={
            "data_source": np.array(["math_dapo"] * 2, dtype=object),
            "reward_model": np.array([{"ground_truth": "42"}] * 2, dtype=object),
        },
    )
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": root}})
    steps = []
    try:
        for kwargs in cases:  # each with fresh reward workers: new processes, nothing learnt
            manager = RewardLoopManager(config(kwargs))
            try:
                out = manager.compute_rm_score(data)
            except KeyError as exc:
                steps.append({"KeyError": str(exc)})
            else:
                scores = out.batch["rm_scores"].sum(dim=1).tolist()
                columns = {k: [str(v) for v in c] for k, c in out.non_tensor_batch.items()}
                steps.append({"scores": scores, "columns": columns})
            for worker in manager.reward_loop_workers:
                ray.kill(worker)
        print(json.dumps(steps))
    finally:
        ray.shutdown()
    """
)


def verl_steps(tmp_path: Path, *cases: dict[str, Any]) -> list[dict[str, Any]]:
    """One step of verl's reward loop per case of the guard's ``reward_kwargs``."""
    (tmp_path / "dapo.py").write_text(SCORER)
    scorer = {"scorer": f"{tmp_path}/dapo.py:compute_score", "budget": 2.0}
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            STEP,
            str(tmp_path),
            str(ROOT),
            json.dumps([{**scorer, **case} for case in cases]),
        ],
        capture_output=True,
        text=True,
        timeout=400,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT), "TOKENIZERS_PARALLELISM": "false"},
    )
    assert done.returncode == 0, done.stderr[-4000:]
    steps: list[dict[str, Any]] = json.loads(done.stdout.strip().splitlines()[-1])
    return steps


def test_a_crash_before_any_dict_answer_in_a_reward_worker(tmp_path: Path) -> None:
    warm = {"data_source": "math_dapo", "solution_str": "so 42", "ground_truth": "42"}
    declared = {"score": 0.0, "acc": False, "pred": ""}
    bare, warmed, given = verl_steps(
        tmp_path, {"default": 0.0}, {"default": 0.0, "warmup": warm}, {"default": declared}
    )
    # The issue as verl users met it: nothing told the second worker the answers' keys.
    assert bare == {"KeyError": "'score'"}
    for step in (warmed, given):
        assert step["scores"] == [1.0, 0.0]
        assert step["columns"] == {
            "score": ["1.0", "0.0"],
            "acc": ["True", "False"],
            "pred": ["o 42", ""],
        }
