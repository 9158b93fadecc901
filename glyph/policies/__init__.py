"""Reference policies and a local OpenAI-compatible server that plays them."""
