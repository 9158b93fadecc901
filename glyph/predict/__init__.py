"""PREDICT: GRPO on the agent's actions, the sampled prediction-label tokens
held out of RL credit, and cross-entropy (weight alpha) on the outcome the
environment verified, at the exact context the prediction was made in."""
