"""TRL's own ``GRPOTrainer`` (trl 1.16.0) trained for three steps on CPU, with a tiny random
model, its reward functions guarded on one shared pool: one scores, one hangs in C on every
sample. The run is a subprocess (TRL and transformers warn as they import, which this suite's
``filterwarnings = error`` would turn into failures), its log history printed as JSON.

What must hold: every step ends (each hang killed at its budget); the hung function's samples,
``None``, are left out of its mean and of the reward, which is the scoring function's alone
(trl/trainer/grpo_trainer.py:1663, 2676-2690 at f2cd5771); ``reward_hang``, ``reward_seconds``
and ``reward_slow`` reach TRL's logged metrics through ``log_metric`` (:1598-1610); the two
functions started one pool.
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
    pytest.mark.needs_extra("trl"),
    pytest.mark.timeout(600),
    pytest.mark.usefixtures("no_leaks"),
]

SCORERS = textwrap.dedent(
    """
    def accuracy(completion, ground_truth):
        return float(str(completion).strip().endswith(ground_truth))


    def always_hangs(completion):
        return float(sum(range(10**13)))
    """
)

TRAIN = textwrap.dedent(
    """
    import json, os, sys
    os.environ["WANDB_DISABLED"] = "true"
    from datasets import Dataset
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
    from trl import GRPOConfig, GRPOTrainer
    from pytest_rewardhang.adapters import close_pools
    from pytest_rewardhang.adapters.trl import pooled_rewards

    words = ["[PAD]", "[UNK]", "<eos>", "so", "it", "is", "42", "7"]
    vocab = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    vocab.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=vocab, pad_token="[PAD]", eos_token="<eos>", unk_token="[UNK]"
    )
    model = LlamaForCausalLM(LlamaConfig(
        vocab_size=len(words), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64,
        pad_token_id=0, eos_token_id=2,
    ))
    here = sys.argv[1]
    accuracy, always_hangs = pooled_rewards(
        [f"{here}/rewards.py:accuracy", f"{here}/rewards.py:always_hangs"],
        budget=0.5, default=None, workers=2, slow_s=0.25,
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[accuracy, always_hangs],
        args=GRPOConfig(
            output_dir=f"{here}/out", per_device_train_batch_size=4, num_generations=4,
            max_completion_length=4, max_steps=3, logging_steps=1, report_to=[], use_cpu=True,
            save_strategy="no", seed=0,
        ),
        train_dataset=Dataset.from_dict({"prompt": ["so it is"] * 8, "ground_truth": ["42"] * 8}),
        processing_class=tok,
    )
    trainer.train()
    pools = {id(accuracy.scoring.pool()), id(always_hangs.scoring.pool())}
    close_pools()
    steps = [row for row in trainer.state.log_history if "reward" in row]
    print(json.dumps({"steps": steps, "pools": len(pools)}))
    """
)


def test_grpo_trainer_trains_with_a_reward_function_that_hangs_on_every_sample(
    tmp_path: Path,
) -> None:
    (tmp_path / "rewards.py").write_text(SCORERS)
    (tmp_path / "tmp").mkdir()  # torch's caches (torchinductor_*) go here, not in the shared /tmp
    done = subprocess.run(
        [sys.executable, "-c", TRAIN, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=500,
        cwd=tmp_path,
        env={
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "TOKENIZERS_PARALLELISM": "false",
            "TMPDIR": str(tmp_path / "tmp"),
        },
    )
    assert done.returncode == 0, done.stderr[-4000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    steps = result["steps"]
    assert len(steps) == 3
    for step in steps:
        # TRL's own aggregation left the hung function's None out: no mean, and the reward is
        # the scoring function's alone.
        assert step["rewards/always_hangs/mean"] is None
        assert step["reward"] == pytest.approx(step["rewards/accuracy/mean"])
        # Half the samples scored (one function of two) got the default, each killed at its
        # budget: slow over 0.25 s; the other half scored in milliseconds.
        assert step["reward_hang"] == pytest.approx(0.5)
        assert step["reward_slow"] == pytest.approx(0.5)
        assert 0.25 <= step["reward_seconds"] < 5.0
    assert result["pools"] == 1
    assert "always_hangs: timeout" in done.stderr  # one warning line per hung sample
