"""Code that runs inside the sandbox server. Stdlib only: it is started with
``python -I -S`` and must import nothing from glyph outside this folder."""
