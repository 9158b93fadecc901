"""The flywheel benchmark: reinforcement learning at the context layer.

The policy update is a lesson carried in context, not a weight change:
roll out the train tasks, cluster the graded failures, distil one lesson
from the largest cluster, and keep it only if its gain on the sealed
holdout split clears the measured noise band (``gate``)."""
