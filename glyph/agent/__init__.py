"""The agent side: shipped into the runtime whole, stdlib only."""
