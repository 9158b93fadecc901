"""Snapshot/replay credit assignment on glyph-mbpp trajectories."""
