"""TRL's length-scaled reward is made by a factory: the one step a GRPOTrainer user writes."""

from trl.rewards.accuracy_rewards import get_cosine_scaled_reward

cosine_scaled_reward = get_cosine_scaled_reward(max_len=1024)
