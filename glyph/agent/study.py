"""The PREDICT study's protocol constants, in one place.

glyph's ``study`` profile rebuilds the study's experiment (repository
JayZenith/PREDICT, commit ``fced785a``): what its model was shown and what
its data pipeline wrote. The texts below are the study's own (prompts,
observation strings, tool names, argument keys, the workspace placeholder,
the recovery mutation table); each names the study file it comes from.
Nothing else in glyph spells them out: code that speaks the study's protocol
imports them from here. The algorithms that use them are glyph's own code
(``glyph.data.study`` for the splits, task rows and SFT traces).

Stdlib only and import-free: shipped into the runtime with the agent layer.
"""

from __future__ import annotations

# ---------------------------------------------------------------- prompts

# src/glyph/chat.py (ARM_A_SYSTEM_PROMPT)
SYSTEM_PROMPT_A = (
    "You are a Python coding agent. Use tools when needed. "
    "After FINAL, stop immediately."
)
# src/glyph/chat.py (ARM_B_SYSTEM_PROMPT)
SYSTEM_PROMPT_B = (
    "You are a Python coding agent. After apply_patch succeeds, predict before "
    "testing: emit <PREDICTION>OUTCOME</PREDICTION>, then "
    "<DECISION>KEEP</DECISION> to test or <DECISION>REVISE</DECISION> to patch. "
    "OUTCOME is PASS, ASSERTION_FAILURE, RUNTIME_ERROR, SYNTAX_ERROR, TIMEOUT, "
    "or OTHER. After FINAL, stop."
)
SYSTEM_PROMPTS = {"a": SYSTEM_PROMPT_A, "b": SYSTEM_PROMPT_B}

# data/prepare.py (task_prompt): the user message, filled with the task's
# text, its test code (right-stripped) and the project's path.
USER_PROMPT = (
    "Implement the requested Python function in solution.py. Run the tests.\n\n"
    "{task}\n\n"
    "Your code must pass these tests:\n"
    "{tests}\n\n"
    "The project is at {project}."
)

# data/prepare.py (PLACEHOLDER): solution.py as the agent finds it.
PLACEHOLDER = "# Write your function here.\n"
# data/prepare.py (task_row): the blueprint folder, relative to the data
# folder, and the project path the agent is told (relative to the runtime's cwd).
BLUEPRINT_ROOT = "blueprints/mbpp_{task_id}"
PROJECT_PATH = "data/blueprints/mbpp_{task_id}"
SOLUTION_FILE = "solution.py"  # data/prepare.py (sft_row: file_path)

# ---------------------------------------------------------------- turns

# src/glyph/program.py (SUPPORTED_TOOLS, execute_tool): tool names and the
# argument keys each reads; every call carries its id under ID_KEY.
READ_FILE, APPLY_PATCH, PYTHON_TEST = "read_file", "apply_patch", "python_test"
TOOLS = (READ_FILE, APPLY_PATCH, PYTHON_TEST)
ID_KEY = "id"
TOOL_ARGS = {READ_FILE: ("file_path",), APPLY_PATCH: ("file_path", "find", "replace"),
             PYTHON_TEST: ("project_path",)}
# data/prepare.py (_call): "CALL <tool> <compact JSON object>".
CALL_PREFIX = "CALL "
JSON_SEPARATORS = (",", ":")
# src/glyph/program.py (validate_turn_shape): a FINAL turn starts so.
FINAL_PREFIX = "FINAL:"
# data/prepare.py (sft_row): the FINAL turn of every SFT trace.
FINAL_TURN = "FINAL: implemented the function and passed the tests."
# data/prepare.py (sft_row) and src/glyph/program.py (PREDICTION_RE, DECISION_RE):
# an Arm B prediction turn is these two lines, then the CALL line.
PREDICTION_LINE = "<PREDICTION>{outcome}</PREDICTION>"
DECISION_LINE = "<DECISION>{decision}</DECISION>"
KEEP, REVISE = "KEEP", "REVISE"

# ---------------------------------------------------------------- observations

# src/glyph/program.py (result_block): a tool message's content is
# "RESULT <id>:" then these lines, each present only when it applies.
RESULT_HEAD = "RESULT {id}:"
STATUS_LINE = "status: {status}"
STATUS_SUCCESS, STATUS_FAILED = "success", "failed"
TIMED_OUT_LINE = "timed_out: true"
STDOUT_LINE = "stdout:"
STDERR_LINE = "stderr:"
# src/glyph/program.py (execute_tool, run_hidden_tests): the bodies.
PATCH_APPLIED = "patch applied"
TESTS_PASSED = "tests passed"
# src/glyph/program.py (run_hidden_tests: the failed-run details by outcome).
FAILURE_DETAILS = {
    "ASSERTION_FAILURE": "tests failed",
    "RUNTIME_ERROR": "generated solution raised a runtime error",
    "SYNTAX_ERROR": "generated solution has a syntax error",
    "OTHER": "tests failed",
}
# src/glyph/program.py (run_hidden_tests: a run over its time limit).
TIMEOUT_DETAIL_LIVE = "tests timed out after {timeout}s"
# data/prepare.py (_failed_result): the SFT traces' TIMEOUT detail (no
# timed_out line, no limit in it).
TIMEOUT_DETAIL_SFT = "tests timed out"
# src/glyph/program.py (execute_tool).
READ_FILE_MAX_CHARS = 8000
# src/glyph/program.py (execute_tool, run_hidden_tests): a failed call's stderr.
UNKNOWN_TOOL = "unknown tool: {tool}"
PATCH_NEEDS_ARGS = "apply_patch needs file_path, find, replace"
PATCH_FIND_COUNT = "find must occur exactly once; found {count}"
NO_SOLUTION = "solution.py not found"
TOOL_ERROR = "tool error: {error}"
# src/glyph/program.py (tool defaults: a missing path argument reads so).
DEFAULT_FILE_PATH, DEFAULT_PROJECT_PATH = "", "."

# src/glyph/program.py (parse_call_line, parse_calls, validate_turn_shape,
# parse_prediction_decision, main): the protocol errors an episode ends on.
ERR_MALFORMED_CALL = "malformed CALL"
ERR_CALL_ID = "CALL requires a string id"
ERR_CALL_ARGS = "CALL arguments must be strings"
ERR_DUPLICATE_ID = "duplicate CALL id {id}"
ERR_ONE_CALL_OR_FINAL = "assistant turn must contain exactly one CALL or one FINAL"
ERR_ONE_CALL = "assistant turn requires exactly one CALL"
ERR_PREDICTION_SHAPE = "Arm B prediction turn requires PREDICTION, DECISION, and one CALL"
ERR_EXTRA_TEXT = "CALL turn cannot contain additional text"
ERR_ONE_PREDICTION = "Arm B requires exactly one PREDICTION"
ERR_UNKNOWN_PREDICTION = "unknown prediction outcome: {prediction}"
ERR_ONE_DECISION = "Arm B requires exactly one DECISION"
ERR_UNKNOWN_DECISION = "unknown decision: {decision}"
ERR_DECISION_TOOL = "{decision} requires CALL {expected}, got {tool}"
ERR_BUDGET = "visible tool-call budget exhausted"
ERR_TEST_BEFORE_KEEP = "Arm B must predict and choose KEEP before python_test"

# ---------------------------------------------------------------- settings

# src/glyph/harness.py (GlyphHarnessConfig) and src/glyph/program.py (parse_args).
MAX_TOOL_CALLS = 8
TOOL_TIMEOUT_S = 30
MODEL_TIMEOUT_S = 1800  # src/glyph/program.py (AsyncOpenAI timeout)
# data/prepare.py (prepare_data: timeout) : the limit the SFT recovery search grades under.
SFT_TEST_TIMEOUT_S = 5
# data/prepare.py (SFT_MAX_TOKENS): a recovery trace must fit this under CHAT_TURN.
SFT_MAX_TOKENS = 1280
# src/glyph/chat.py (render_message, render_messages): the study's chat
# format, one block per message (content right-stripped), the fit gate's text.
CHAT_TURN = "<|im_start|>{role}\n{content}\n<|im_end|>\n\n"

# ---------------------------------------------------------------- data

# data/prepare.py (SEED, split and composition counts).
SEED = 42
VALIDATION_TO_TRAIN = 50
SFT_COUNT = 212
RL_COUNT = 212
SHALLOW_MODES = ("shadow", "visible")  # data/prepare.py (recovery_modes), alternating in selection order
DEEP_MODES = ("deep_shadow", "deep_visible")  # data/prepare.py (DEEP_RECOVERY_MODES)
MODE_COUNTS = {"shadow": 25, "visible": 25, "deep_shadow": 10, "deep_visible": 10}
# data/prepare.py (sft_row): trace_type values.
DIRECT, RECOVERY = "direct", "recovery"

# data/recovery.py (_REPLACEMENTS): the recovery mutations, token -> its
# replacement (a decimal integer literal n becomes n + 1 besides).
MUTATIONS = {
    "<=": "<", ">=": ">", "==": "!=", "!=": "==", "+": "-", "-": "+", "*": "+",
    "and": "or", "or": "and", "min": "max", "max": "min", "True": "False", "False": "True",
}
# data/recovery.py (_mutations): a line starting (after indentation) with one
# of these is never mutated.
UNMUTATED_LINE_PREFIXES = ("def ", "import ", "from ")
