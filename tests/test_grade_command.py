"""`python -m attn_edu.grade`: misbehaving submissions never pass, never stop the grader, always get JSON.

The bad submissions are written here from the committed exercise notebook: exercise 02.1's
`raise NotImplementedError(...)` line is replaced by the misbehaviour. All of them are graded by one
run of the command over a folder (two notebooks at a time, small time limits), and each test reads its
learner's entry from the JSON and CSV that run wrote.
"""

from __future__ import annotations

import csv
import json
import math
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import once_per_run
from test_gradescope import validate

from attn_edu.grading import command, gradescope, protocol
from attn_edu.grading.answers import RECORD_MIME, record
from attn_edu.grading.protocol import Outcome
from attn_edu.grading.registry import exercises, questions

ROOT = Path(__file__).resolve().parent.parent
EXERCISE = ROOT / "exercises" / "02_qkv_scaled_dot_product_exercises.ipynb"
SOLUTION = ROOT / "solutions" / "02_qkv_scaled_dot_product.ipynb"
LIMITS = ["--timeout", "3", "--cell-timeout", "4", "--notebook-timeout", "15", "--memory-mb", "2048"]
# These submissions test what a plain process survives; the sandbox's own guarantees are tested with the attacks
# (tests/test_grading_attacks.py). Without it each notebook starts in a second instead of four.
PLAIN = ["--sandbox", "none"]

PATCHES = {
    "patch_allclose": "torch.allclose = lambda *args, **kwargs: True",
    "patch_equal": "torch.equal = lambda *args, **kwargs: True",
    "patch_assert_close": "torch.testing.assert_close = lambda *args, **kwargs: None",
    "patch_np_allclose": "import numpy\nnumpy.allclose = lambda *args, **kwargs: True",
}
WRONG_BUT_RIGHT_SHAPE = "return torch.zeros(*q.shape[:-1], k.shape[-2])"

# learner name -> the body of attention_weights (02.1), indented by 4 spaces
BODIES = {
    "infinite_loop": "while True:\n    pass",
    "print_loop": "while True:\n    print('spam ' * 100)",
    "os_exit": "import os\nos._exit(3)",
    "sys_exit": "import sys\nsys.exit(0)",
    "exception": "raise ValueError('boom')",
    "memory_bomb": "blocks = []\nwhile True:\n    blocks.append(torch.empty(2**28))  # 1 GB more each time",
    "input": "return input('your answer? ')",
    "huge_print": "big = torch.rand(2000, 2000)\nprint(big)\nprint(big.sum(dim=0))\nreturn big",
    "eq_always_true": "class Yes:\n    def __eq__(self, other):\n        return True\nreturn Yes()",
    "tensor_subclass": (
        "class Liar(torch.Tensor):\n    def __eq__(self, other):\n        return True\n"
        f"{WRONG_BUT_RIGHT_SHAPE}.as_subclass(Liar)"
    ),
    # every comparison function patched at once: the grade fails if any one of them could fool the grader
    "patches": "\n".join(PATCHES.values()) + f"\n{WRONG_BUT_RIGHT_SHAPE}",
    "calls_reference": "from attn_edu.attention import attention_weights as ref\nreturn ref(q, k, scale=scale)",
    "profiler_off": (
        "import sys\nsys.setprofile(None)\n"
        "from attn_edu.attention import attention_weights as ref\nreturn ref(q, k, scale=scale)"
    ),
}


def _load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _cell_of(nb: dict, exercise_id: str) -> dict:
    marker = f"# Exercise {exercise_id}:"
    return next(c for c in nb["cells"] if c["cell_type"] == "code" and marker in "".join(c["source"]))


def _with_body(nb: dict, body: str) -> dict:
    cell = _cell_of(nb, "02.1")
    lines = "".join(cell["source"]).split("\n")
    at = next(i for i, line in enumerate(lines) if "raise NotImplementedError" in line)
    lines[at : at + 1] = ["    " + line for line in body.split("\n")]
    cell["source"] = "\n".join(lines)
    return nb


def _submissions(folder: Path) -> None:
    for name, body in BODIES.items():
        nb = _with_body(_load(EXERCISE), body)
        if name == "patches":  # patched in a cell of its own too, before anything is checked
            nb["cells"].insert(
                3,
                {
                    "cell_type": "code",
                    "metadata": {},
                    "source": "\n".join(PATCHES.values()),
                    "outputs": [],
                    "execution_count": None,
                },
            )
        (folder / f"{name}.ipynb").write_text(json.dumps(nb), encoding="utf-8")
    nb = _load(EXERCISE)
    nb["cells"].remove(_cell_of(nb, "02.1"))
    (folder / "cell_deleted.ipynb").write_text(json.dumps(nb), encoding="utf-8")
    nb = _load(EXERCISE)  # no function of their own: the package's, imported under the expected name
    _cell_of(nb, "02.1")["source"] = "# Exercise 02.1:\nfrom attn_edu.attention import attention_weights"
    (folder / "imports_reference.ipynb").write_text(json.dumps(nb), encoding="utf-8")
    nb = _load(SOLUTION)
    cell = _cell_of(nb, "02.1")
    cell["source"] = "".join(cell["source"]).replace("def attention_weights(", "def my_weights(")
    (folder / "renamed.ipynb").write_text(json.dumps(nb), encoding="utf-8")
    nb = _load(SOLUTION)  # everything right, then the process ends before grading can start
    nb["cells"].append(
        {
            "cell_type": "code",
            "metadata": {},
            "source": "import os\nos._exit(0)",
            "outputs": [],
            "execution_count": None,
        }
    )
    (folder / "top_level_exit.ipynb").write_text(json.dumps(nb), encoding="utf-8")
    nb = _load(
        SOLUTION
    )  # a cell that ignores the cell time limit: only the notebook limit stops it (it waits
    # rather than spins, so that its 15 s do not take a core from the tests beside it; the loops above spin)
    nb["cells"].append(
        {
            "cell_type": "code",
            "metadata": {},
            "execution_count": None,
            "outputs": [],
            "source": "import signal, time\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\nwhile True:\n    time.sleep(0.1)",
        }
    )
    (folder / "ignores_alarm.ipynb").write_text(json.dumps(nb), encoding="utf-8")
    nb = _load(SOLUTION)  # right answers now, but a wrong first answer saved in 02.q1's output
    cell = next(
        c for c in nb["cells"] if c["cell_type"] == "code" and 'check("02.q1"' in "".join(c["source"])
    )
    first = record("02.q1", protocol.encode_answer(192))
    cell["outputs"] = [{"output_type": "display_data", "metadata": {}, "data": {RECORD_MIME: first}}]
    (folder / "first_answer.ipynb").write_text(json.dumps(nb), encoding="utf-8")
    (folder / "not_json.ipynb").write_text("{ this is not a notebook", encoding="utf-8")
    (folder / "untouched.ipynb").write_text(EXERCISE.read_text(encoding="utf-8"), encoding="utf-8")
    (folder / "solution.ipynb").write_text(SOLUTION.read_text(encoding="utf-8"), encoding="utf-8")


@pytest.fixture(scope="module")
def graded(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The folder of submissions, graded once for the whole run (pytest-xdist workers share the result)."""
    return once_per_run(tmp_path_factory, "grade-command", lambda: _graded_folder(tmp_path_factory))


def _graded_folder(tmp_path_factory: pytest.TempPathFactory) -> dict:
    folder = tmp_path_factory.mktemp("submissions")
    _submissions(folder)
    out = tmp_path_factory.mktemp("out")
    command = [
        sys.executable,
        "-m",
        "attn_edu.grade",
        str(folder),
        "--notebook",
        "02",
        "--jobs",
        "2",
        *LIMITS,
        *PLAIN,
    ]
    command += ["--json", str(out / "grades.json"), "--csv", str(out / "grades.csv")]
    run = subprocess.run(command, capture_output=True, text=True, timeout=240, cwd=out)
    document = _load(out / "grades.json")
    with open(out / "grades.csv", newline="", encoding="utf-8") as f:
        rows = {row["learner"]: row for row in csv.DictReader(f)}
    by_learner = {s["learner"]: s for s in document["submissions"]}
    run_seen = {"returncode": run.returncode, "stdout": run.stdout, "stderr": run.stderr}
    return {"run": run_seen, "document": document, "rows": rows, "by_learner": by_learner}


def _status(graded: dict, learner: str, exercise_id: str = "02.1") -> dict:
    entry = graded["by_learner"][learner]
    result = next(r for r in entry["exercises"] if r["id"] == exercise_id)
    assert graded["rows"][learner][exercise_id] == result["status"]  # the CSV agrees with the JSON
    return result


EXPECTED = {
    "infinite_loop": ("TIMEOUT", "no answer within 3 s"),
    "print_loop": ("TIMEOUT", "no answer within 3 s"),
    "os_exit": ("ERROR", "exit code 3"),
    "sys_exit": ("ERROR", "SystemExit"),
    "exception": ("ERROR", "ValueError for q "),  # "ValueError for q (..), k (..): boom"
    "memory_bomb": ("ERROR", "memory"),
    "input": ("ERROR", "EOFError"),
    "huge_print": ("FAIL", "got (2000, 2000)"),
    "eq_always_true": ("FAIL", "got Yes"),
    "tensor_subclass": ("FAIL", "subclass of torch.Tensor (Liar)"),
    "patches": ("FAIL", "values differ"),
    "cell_deleted": ("NOT_ATTEMPTED", "no function named `attention_weights`"),
    "renamed": ("NOT_ATTEMPTED", "no function named `attention_weights`"),
    "top_level_exit": ("ERROR", "ended before this exercise was graded"),
    "ignores_alarm": ("TIMEOUT", "did not finish within 15 s"),
    "not_json": ("ERROR", "not a readable notebook"),
    "calls_reference": ("FAIL", "calls attn_edu.attention.attention_weights"),
    "profiler_off": ("FAIL", "sys.setprofile"),
    "imports_reference": ("FAIL", "calls attn_edu.attention.attention_weights"),
}


@pytest.mark.slow  # grades every submission in a process of its own, once per run (about 25 s)
@pytest.mark.parametrize("learner", sorted(EXPECTED))
def test_bad_submission_is_reported_not_passed(graded: dict, learner: str) -> None:
    status, words = EXPECTED[learner]
    result = _status(graded, learner)
    assert result["status"] == status, result
    assert words.lower() in (result["message"] + " " + result["hint"]).lower(), result
    assert result["points"] == 0


# Notebook 02's graded items: its exercises, then its concept questions.
ITEMS_02 = [i for i in exercises() if i.startswith("02.")] + [i for i in questions() if i.startswith("02.")]


@pytest.mark.slow  # grades every submission in a process of its own, once per run (about 25 s)
def test_solution_passes_everything(graded: dict) -> None:
    entry = graded["by_learner"]["solution"]
    assert [r["id"] for r in entry["exercises"]] == ITEMS_02 and len(ITEMS_02) >= 5
    assert [r["status"] for r in entry["exercises"]] == ["PASS"] * len(ITEMS_02)
    items = {**exercises(), **questions()}
    assert entry["points"] == entry["max_points"] == sum(items[i].points for i in ITEMS_02)


@pytest.mark.slow  # grades every submission in a process of its own, once per run (about 25 s)
def test_a_question_is_scored_on_the_first_answer_its_notebook_recorded(graded: dict) -> None:
    results = {r["id"]: r for r in graded["by_learner"]["first_answer"]["exercises"]}
    first = results["02.q1"]  # 384 in the notebook now; 192 recorded first
    assert first["status"] == "FAIL" and first["first_answer"] and first["points"] == 0, first
    assert first["message"].startswith("the first answer recorded in the notebook: "), first
    assert "each of the B = 2 sequences" in first["hint"] + first["message"]  # 192's own explanation
    others = [r for i, r in results.items() if i != "02.q1"]
    assert all(r["status"] == "PASS" for r in others), others


@pytest.mark.slow  # grades every submission in a process of its own, once per run (about 25 s)
def test_untouched_exercise_is_not_attempted(graded: dict) -> None:
    statuses = [r["status"] for r in graded["by_learner"]["untouched"]["exercises"]]
    assert statuses == ["NOT_ATTEMPTED"] * len(ITEMS_02)


@pytest.mark.slow  # grades every submission in a process of its own, once per run (about 25 s)
def test_other_exercises_still_graded_after_a_bad_one(graded: dict) -> None:
    # 02.1 loops forever; 02.2 and 02.3 are untouched and must still be reached
    assert _status(graded, "infinite_loop", "02.2")["status"] == "NOT_ATTEMPTED"


@pytest.mark.slow  # grades every submission in a process of its own, once per run (about 25 s)
def test_command_output_and_exit_code(graded: dict) -> None:
    run = graded["run"]
    assert run["returncode"] == 1, run["stderr"]
    assert "solution" in run["stdout"] and "02.1   PASS" in run["stdout"]
    assert (
        len(graded["rows"]) == len(graded["document"]["submissions"]) == len(EXPECTED) + 3
    )  # and solution, untouched, first_answer


@pytest.mark.slow  # grades every submission in a process of its own, once per run (about 25 s)
def test_gradescope_results_of_every_submission_follow_the_format(graded: dict) -> None:
    """The misbehaving submissions above, as Gradescope's results.json: valid, and nothing passed that did not."""
    results = gradescope.results(graded["document"])
    validate(results)
    submissions = graded["document"]["submissions"]
    passed = {(t["extra_data"]["learner"], t["number"]) for t in results["tests"] if t["status"] == "passed"}
    in_report = {
        (s["learner"], r["id"]) for s in submissions for r in s["exercises"] if r["status"] == "PASS"
    }
    assert passed == in_report and {("solution", i) for i in ITEMS_02} <= passed
    assert not {learner for learner, exercise_id in passed if exercise_id == "02.1"} & set(EXPECTED)
    assert results["score"] == sum(s["points"] for s in submissions)
    not_json = [t for t in results["tests"] if t["extra_data"]["learner"] == "not_json"]
    assert not_json and all("not a readable notebook" in t["output"] for t in not_json)


def test_all_pass_exits_zero_and_grader_failure_exits_two(tmp_path: Path) -> None:
    json_path = tmp_path / "grades.json"
    assert command.main([str(SOLUTION), "--json", str(json_path), *LIMITS]) == 0
    assert _load(json_path)["submissions"][0]["passed"] is True
    assert command.main([str(tmp_path / "missing.ipynb"), "--json", str(json_path)]) == 2
    assert "no notebook or folder" in _load(json_path)["error"]


# ---------------------------------------------------------------------------------------------------------
# The schema that results from the learner's process must follow


def test_decode_outcome_reads_plain_numbers() -> None:
    raw = {"kind": "tensor", "dtype": "float32", "shape": [2, 2], "data": [1.0, "nan", 2, "-inf"]}
    out = protocol.decode_outcome(raw, max_elements=4)
    assert out.kind == "tensor" and out.tensor.shape == (2, 2) and math.isnan(out.tensor[0, 1])
    big = protocol.decode_outcome({"kind": "oversized", "dtype": "bool", "shape": [10**6, 10**6]}, 100)
    assert big.tensor.shape == (10**6, 10**6)  # only the shape, for the message


@pytest.mark.parametrize(
    "raw",
    [
        {"kind": "tensor", "dtype": "float32", "shape": [2], "data": [1.0, 2.0], "extra": 1},
        {"kind": "tensor", "dtype": "float32", "shape": [3], "data": [1.0, 2.0]},
        {"kind": "tensor", "dtype": "float32", "shape": [2], "data": [True, 1.0]},
        {"kind": "tensor", "dtype": "float32", "shape": [2], "data": [1e400, 1.0]},
        {"kind": "tensor", "dtype": "bool", "shape": [2], "data": [1, 0]},
        {"kind": "tensor", "dtype": "int8", "shape": [1], "data": [1000]},
        {"kind": "tensor", "dtype": "complex64", "shape": [1], "data": [1.0]},
        {"kind": "tensor", "dtype": "float32", "shape": [-1], "data": []},
        {"kind": "tensor", "dtype": "float32", "shape": [100], "data": [0.0] * 100},
        {"kind": "oversized", "dtype": "float32", "shape": [2]},
        {"kind": "error", "detail": 3},
        {"kind": "pass"},
        ["tensor"],
    ],
)
def test_decode_outcome_rejects_malformed_results(raw: object) -> None:
    with pytest.raises(protocol.SchemaError):
        protocol.decode_outcome(raw, max_elements=10)


def test_a_reply_is_read_only_as_the_answer_to_the_request_just_sent() -> None:
    good = {
        "event": "exercise",
        "id": "02.1",
        "nonce": "n1",
        "outcomes": [{"kind": "error", "detail": "x\x1b[2J"}],
    }
    assert protocol.take_exercise_reply(good, "02.1", "n1", [10]) == (
        [Outcome("error", detail="x [2J")],
        None,
    )
    noted = {
        **good,
        "algorithm": "builds a 5 x 7 tensor\x1b",
    }  # what the worker saw of the algorithm, cleaned
    assert protocol.take_exercise_reply(noted, "02.1", "n1", [10])[1] == "builds a 5 x 7 tensor "
    missing = {"event": "exercise", "id": "02.1", "nonce": "n1", "missing": True}
    assert protocol.take_exercise_reply(missing, "02.1", "n1", [10]) is None
    forged = [
        {**good, "nonce": "guessed"},  # written before the request existed
        {**good, "id": "02.2"},  # another exercise's
        {k: v for k, v in good.items() if k != "nonce"},
        {**good, "outcomes": [good["outcomes"][0]] * 2},  # more outcomes than cases
        {**good, "event": "answers"},
        ["exercise"],
    ]
    for reply in forged:
        with pytest.raises(protocol.SchemaError):
            protocol.take_exercise_reply(reply, "02.1", "n1", [10])
    bad_value = {**good, "outcomes": [{"kind": "tensor", "dtype": "float32", "shape": [1], "data": ["NaN!"]}]}
    assert protocol.take_exercise_reply(bad_value, "02.1", "n1", [10])[0][0].kind == "error"
    answers = {
        "event": "answers",
        "nonce": "n2",
        "answers": {"02.q1": {"kind": "number", "value": 3}, "02.q2": {"missing": True}},
    }
    taken = protocol.take_answers_reply(answers, ["02.q1", "02.q2"], "n2")
    assert float(taken["02.q1"].tensor) == 3 and taken["02.q2"] is None
    with pytest.raises(protocol.SchemaError):
        protocol.take_answers_reply(answers, ["02.q1"], "n2")  # an answer to a question not asked


def test_messages_are_framed_and_bounded() -> None:
    import socket

    def pair() -> tuple[socket.socket, socket.socket]:
        return socket.socketpair()

    a, b = pair()
    with a, b:
        protocol.send_message(a, {"event": "started"})
        assert protocol.receive_message(b) == {"event": "started"}
        protocol.send_message(a, {"data": "x" * 100})
        with pytest.raises(protocol.SchemaError, match="over the limit"):
            protocol.receive_message(b, max_bytes=50)
    a, b = pair()
    with a, b:
        a.sendall(b"\x00\x00\x00\x03NaN")  # a bare NaN is not JSON
        with pytest.raises(protocol.SchemaError):
            protocol.receive_message(b)
        a.close()
        with pytest.raises(protocol.Closed):
            protocol.receive_message(b)
    a, b = pair()
    with (
        a,
        b,
    ):  # the grader's inputs hold -inf (masked scores): the worker reads them, the grader refuses them
        a.sendall(b"\x00\x00\x00\x0b[-Infinity]" * 2)
        assert protocol.receive_message(b, from_grader=True) == [float("-inf")]
        with pytest.raises(protocol.SchemaError):
            protocol.receive_message(b)
    a, b = pair()
    with a, b, pytest.raises(protocol.Closed):
        protocol.receive_message(b, deadline=time.monotonic() + 0.05)  # nothing sent in time
