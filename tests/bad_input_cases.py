"""Bad and edge inputs across every command and the pytest plugin, with what each must answer.

One table serves two readers: ``tests/test_bad_inputs.py`` asserts every row,
``benchmarks/bad_inputs_report.py`` runs every row as a user would (a fresh
process) and writes ``reports/bad_inputs.md``. A row says the command line
(``{d}`` is a folder of fixture files made by :func:`make_fixtures`), the exit
status, and a fragment of the first line of output. Bad input is exit 2 from
the console script (pytest's usage error, 4, from the plugin), one line, no
traceback; nothing that did not run ever says "holds".
"""

# A table reads best one row per line: long rows are allowed here.
# ruff: noqa: E501

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

NEMOTRON = json.dumps(
    {"max_model_len": 2048, "max_num_batched_tokens": 4096,
     "groups": [{"kind": "full", "block_size": 16}, {"kind": "cross", "block_size": 16}]}
)  # fmt: skip
"""The bug's shape as a harness config: 3329 encoder tokens need 209 columns, the pre-fix width is 128."""

UNUSABLE = "tests.unusable_policies"


def runner_config(**changes: object) -> str:
    """The Nemotron config with fields changed (or dropped when the value is ``...``)."""
    data = json.loads(NEMOTRON)
    for key, value in changes.items():
        if value is ...:
            data.pop(key, None)
        else:
            data[key] = value
    return json.dumps(data)


def with_group(**changes: object) -> str:
    """The Nemotron config with its cross group's fields changed."""
    data = json.loads(NEMOTRON)
    data["groups"][1].update(changes)
    return json.dumps(data)


@dataclass(frozen=True)
class Case:
    """One command line and what it must answer."""

    args: tuple[str, ...]
    status: int
    says: str  # a fragment of the first line of output (stderr first, then stdout)
    isolated: bool = False  # needs a fresh interpreter: the plugin, or the property suite runs
    env: dict[str, str] = field(default_factory=dict)  # values may hold {d}
    stdout: str = ""  # "full": stdout is /dev/full; "closed": a pipe whose reader has gone (isolated rows)

    @property
    def command(self) -> str:
        return "pytest" if self.args[0] == "pytest" else self.args[0]

    def argv(self, d: Path) -> list[str]:
        return [a.replace("{d}", str(d)).replace("{fixtures}", str(FIXTURES)) for a in self.args]

    def environ(self, d: Path) -> dict[str, str]:
        return {k: v.replace("{d}", str(d)) for k, v in self.env.items()}

    @property
    def id(self) -> str:
        return " ".join(self.args)[:90]


def make_fixtures(d: Path) -> Path:
    """The files the cases name: bad encodings, deep nesting, decoder-only configs, a bad regression."""
    d.mkdir(parents=True, exist_ok=True)
    (d / "nonutf8.json").write_bytes(b"\xff\xfe{\x00}\x00")
    (d / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (d / "list.json").write_text("[1, 2]")
    (d / "gpt2.json").write_text(json.dumps({"model_type": "gpt2"}))
    (d / "llama.json").write_text(json.dumps({"model_type": "llama"}))
    (d / "whisper-abc.json").write_text(json.dumps({"model_type": "whisper", "max_source_positions": "abc"}))
    (d / "whisper-false.json").write_text(json.dumps({"model_type": "whisper", "is_encoder_decoder": "false"}))
    (d / "nemotron-big.json").write_text(json.dumps({"model_type": "nemotron_parse", "image_size": "big"}))
    (d / "nemotron-square.json").write_text(json.dumps({"model_type": "nemotron_parse", "image_size": 2048}))
    (d / "bart-m.json").write_text(json.dumps({"model_type": "bart", "max_position_embeddings": 0}))
    (d / "no-cross.json").write_text(runner_config(groups=[{"kind": "full", "block_size": 16}]))
    (d / "a-file").write_text("not a folder\n")
    (d / "empty-cache").mkdir(exist_ok=True)
    bad = d / "bad-regressions"
    bad.mkdir(exist_ok=True)
    (bad / "test_coverage-broken.json").write_text(json.dumps({"config": {"max_model_len": 1}, "encoder_lens": [1]}))
    garbled = d / "garbled-regressions"
    garbled.mkdir(exist_ok=True)
    (garbled / "test_coverage-garbled.json").write_text("{ not json")
    trt = d / "trt-nofunc" / "tensorrt_llm" / "_torch" / "pyexecutor"  # a tree whose KvCacheCreator lacks the sizing
    trt.mkdir(parents=True, exist_ok=True)
    (trt / "_util.py").write_text("class KvCacheCreator:\n    pass\n")
    make_input_fixtures(d)
    make_hostile_fixtures(d)
    make_path_fixtures(d)
    return d


def make_path_fixtures(d: Path) -> None:
    """Paths that block or never end when opened (issue 27): FIFOs, links to a device, a link loop."""
    import os

    def fifo(path: Path) -> None:
        if not path.exists():
            os.mkfifo(path)

    def link(path: Path, target: str | Path) -> None:
        if not os.path.lexists(path):
            path.symlink_to(target)

    fifo(d / "fifo.json")
    link(d / "zero.json", "/dev/zero")
    link(d / "loop", d / "loop-back")
    link(d / "loop-back", d / "loop")
    for name, make in (("fifo-regressions", fifo), ("zero-regressions", lambda p: link(p, "/dev/zero"))):
        (d / name).mkdir(exist_ok=True)
        make(d / name / "test_coverage-special.json")
    (d / "empty-home").mkdir(exist_ok=True)


def make_input_fixtures(d: Path) -> None:
    """Files of issue 20's parsing, output and environment rows (s3-inputs)."""
    (d / "dup-key.json").write_text(NEMOTRON[:-1] + ', "max_model_len": 4096}')
    (d / "long-int.json").write_text('{"max_model_len": ' + "9" * 5000 + "}")
    (d / "long-value.json").write_text(runner_config(notes="x" * 5_000_000))
    (d / "huge-reqs.json").write_text(runner_config(max_num_reqs=10**9))
    unadmitted = d / "unadmitted-regressions"  # E = 4096: a request of 5000 encoder tokens is never admitted
    unadmitted.mkdir(exist_ok=True)
    (unadmitted / "test_coverage-unadmitted.json").write_text(json.dumps({"config": json.loads(NEMOTRON), "encoder_lens": [5000]}))
    (d / "out-regressions").mkdir(exist_ok=True)
    runner = d / "syntax-tree" / "vllm" / "v1" / "worker" / "gpu"
    runner.mkdir(parents=True, exist_ok=True)
    (runner / "model_runner.py").write_text("class GPUModelRunner(:\n    pass\n")


def make_hostile_fixtures(d: Path) -> None:
    """A property suite that holds no test: a folder laid out like ``properties/``, nothing in it. A vLLM
    tree (the recorded 0.25.0) whose sizing's ``cdiv`` sleeps forever, a second at a time."""
    suite = d / "empty-suite" / "properties"
    suite.mkdir(parents=True, exist_ok=True)
    (suite / "test_capacity.py").write_text('"""No property here."""\n')
    (suite.parent / "pyproject.toml").write_text("")
    from tests.engine_tree import build_tree

    math_utils = build_tree(d / "hanging-sizing", "0.25.0") / "vllm" / "utils" / "math_utils.py"
    sleeps = "def cdiv(a, b):\n    import time\n    while True:\n        time.sleep(1)\n"
    math_utils.write_text(math_utils.read_text().replace("def cdiv(a, b):\n", sleeps, 1))


BAD_REGRESSIONS = {"CROSSATTN_REGRESSIONS_DIR": "{d}/bad-regressions"}
GARBLED_REGRESSIONS = {"CROSSATTN_REGRESSIONS_DIR": "{d}/garbled-regressions"}
CAPACITY = "properties/test_capacity.py"
SMALL_DOMAIN = ("--block-size", "1-8", "--max-model-len", "1-64:7", "--encoder-budget", "1-64:7",
                "--source-positions", "absent,0", "--no-progress")  # fmt: skip


FIXTURES = Path(__file__).parent / "fixtures"
SGLANG_TREE = "sglang@{fixtures}/sglang/0.5.23"  # ``{fixtures}``: tests/fixtures, so case names hold no path
SGLANG_BATCH = ("--context-len", "64", "--kv-capacity", "64", "--requests", "5:3:6")
TRT_TREE = "tensorrt_llm@{fixtures}/tensorrt_llm/0004396"
WHISPER_POOL = json.dumps({"family": "whisper-large-v3", "hf_config": {"d_model": 1280, "decoder_layers": 32, "encoder_attention_heads": 20, "max_source_positions": 1500}, "max_seq_len": 2048, "max_input_len": 1024})


def C(*args: str, status: int = 2, says: str, isolated: bool = False, env: dict[str, str] | None = None,
      stdout: str = "") -> Case:  # fmt: skip
    return Case(tuple(args), status, says, isolated or bool(stdout), env or {}, stdout)


CASES: list[Case] = [
    # verify ------------------------------------------------------------------
    C("verify", "--policy", "nope", says="unknown sizing policy 'nope'"),
    C("verify", "--engine", "vllm==0.25.0", "--policy", "mrv2", says="--policy mrv2: does not apply with --engine vllm==0.25.0"),
    C("verify", "--engine", SGLANG_TREE, "--impl", "triton", says="--impl triton: does not apply with --engine sglang@"),
    C("verify", "--engine", SGLANG_TREE, "--device", "cuda", says="--device cuda: does not apply with --engine sglang@"),
    C("verify", "--engine", "nope==1", says="--engine nope==1: names no engine the harness runs"),
    C("verify", "--engine", "vllm==abc", says="--engine 'vllm==abc': not a release"),
    C("verify", "--engine", "sglang@{d}", says="has no sglang package"),
    C("verify", "--engine", "tensorrt_llm@{d}", says="has no tensorrt_llm package"),
    C("verify", "--engine", "tensorrt_llm@{d}/trt-nofunc", says="KvCacheCreator has no _get_cross_kv_cache_layout"),
    C("verify", "--engine", "tensorrt_llm==1.2.1", says="TensorRT-LLM is taken as a source tree only"),
    C("verify", "--engine", TRT_TREE, "--policy", "mrv2", says="--policy mrv2: does not apply with --engine tensorrt_llm@"),
    C("verify", "--engine", TRT_TREE, "--jobs", "7", says="--jobs 7: does not apply with --engine tensorrt_llm@"),
    C("verify", "--engine", TRT_TREE, "-k", "capacity", says="does not apply with --engine tensorrt_llm@"),
    C("verify", "--engine", TRT_TREE, "--in-process", says="--in-process True: does not apply with --engine tensorrt_llm@"),
    # issue 45: an option the engine refuses is refused from its variable too (the variables naming the code under test aside)
    C("verify", "--engine", TRT_TREE, "--max-examples", "3", says="CROSSATTN_DEVICE='cpu': does not apply with --engine tensorrt_llm@", env={"CROSSATTN_DEVICE": "cpu"}),
    C("check", "--engine", TRT_TREE, "--config", WHISPER_POOL, "--encoder-len", "1500", says="CROSSATTN_IN_PROCESS='yes': does not apply with --engine tensorrt_llm@", env={"CROSSATTN_IN_PROCESS": "yes"}),
    C("verify", "--engine", SGLANG_TREE, "--max-examples", "2", says="CROSSATTN_IN_PROCESS='true': does not apply with --engine sglang@", env={"CROSSATTN_IN_PROCESS": "true"}),
    C("verify", "--policy", "nowhere:x", says="module 'nowhere' does not import"),
    C("verify", "--policy", "mrv2:x", says="module 'mrv2' does not import"),
    C("verify", "--policy", f"{UNUSABLE}:raises", says="raised ValueError"),
    C("verify", "--policy", f"{UNUSABLE}:no_argument", says="raised TypeError"),
    C("verify", "--policy", f"{UNUSABLE}:one_width_too_few", says="expected 2 non-negative ints"),
    C("verify", "--policy", f"{UNUSABLE}:floats", says="expected 2 non-negative ints"),
    C("verify", "--policy", f"{UNUSABLE}:NOT_CALLABLE", says="'NOT_CALLABLE' is not callable"),
    C("verify", "--impl", "nope", says="unknown implementation 'nope'"),
    C("verify", "--impl", "nowhere:x", says="module 'nowhere' does not import"),
    C("verify", "--device", "tpu", says="argument --device: invalid choice: 'tpu'"),
    C("verify", "--hypothesis-profile", "nope", says="argument --hypothesis-profile: invalid choice: 'nope'"),
    C("verify", "--max-examples", "0", says="--max-examples 0: must be >= 1"),
    C("verify", "--max-examples", "many", says="argument --max-examples: invalid int value"),
    C("verify", "--seed", "x", says="--seed 'x': must be an integer"),
    C("verify", "--json", "{d}", says="is a folder; name a file to write"),
    C("verify", "--json", "{d}/a-file/report.json", says="a-file is a file, not a folder"),
    C("verify", "--json", "/proc/version", says="--json /proc/version: cannot be written"),
    C("verify", "--junit-xml", "{d}", says="is a folder; name a file to write"),
    C("verify", "--junit-xml", "{d}/a-file/r.xml", says="a-file is a file, not a folder"),
    C("verify", "--bogus", says="unrecognized arguments: --bogus"),
    C("verify", "--policy", "mrv2", "-k", "no_such_property", says="-k 'no_such_property': selects no property",
      isolated=True),
    C("verify", "--policy", "mrv2", "-k", "test_capacity", says="regression file", isolated=True,
      env=BAD_REGRESSIONS),
    C("verify", "--policy", "mrv2", "-k", "test_capacity", says="is not valid JSON", isolated=True,
      env=GARBLED_REGRESSIONS),
    C("verify", "--policy", f"{UNUSABLE}:raises_for_dcp", "-k", "test_capacity", says="raised NotImplementedError",
      isolated=True),
    # check -------------------------------------------------------------------
    C("check", "--config", NEMOTRON, "--encoder-len", "3329", "--policy", "nope", says="unknown sizing policy"),
    C("check", "--config", "{not json", "--encoder-len", "1", says="is not valid JSON"),
    C("check", "--config", "{d}/missing.json", "--encoder-len", "1", says="must be JSON text or the path"),
    C("check", "--config", "{d}/nonutf8.json", "--encoder-len", "1", says="is not UTF-8 text"),
    C("check", "--config", "{d}/deep.json", "--encoder-len", "1", says="nested too deeply"),
    C("check", "--config", "{d}/list.json", "--encoder-len", "1", says="must hold a JSON object"),
    C("check", "--config", "{d}", "--encoder-len", "1", says="must be JSON text or the path"),
    C("check", "--config", runner_config(speed=1), "--encoder-len", "1", says="speed=1: unknown field"),
    C("check", "--config", runner_config(groups=...), "--encoder-len", "1", says="groups=None: is required"),
    C("check", "--config", with_group(dcp_sharded="no"), "--encoder-len", "1",
      says="dcp_sharded='no': must be true or false"),
    C("check", "--config", runner_config(is_encoder_decoder="false"), "--encoder-len", "1",
      says="is_encoder_decoder='false': must be true or false"),
    C("check", "--config", runner_config(prefix_caching=1), "--encoder-len", "1",
      says="prefix_caching=1: must be true or false"),
    C("check", "--config", with_group(block_size=True), "--encoder-len", "1",
      says="block_size=True: must be an integer"),
    C("check", "--config", with_group(kind="crosss"), "--encoder-len", "1", says="kind='crosss': must be one of"),
    C("check", "--config", "{d}/no-cross.json", "--encoder-len", "1", says="needs a cross-attention group"),
    C("check", "--config", runner_config(max_num_batched_tokens=100), "--encoder-len", "1",
      says="max_num_batched_tokens=100: must be >= max_model_len=2048"),
    C("check", "--config", NEMOTRON, "--encoder-len", "abc", says="--encoder-len='abc': must be comma-separated"),
    C("check", "--config", NEMOTRON, "--encoder-len", "0", says="--encoder-len=0: is not admitted"),
    C("check", "--config", NEMOTRON, "--encoder-len", "5000", says="--encoder-len=5000: is not admitted"),
    C("check", "--config", NEMOTRON, "--encoder-len", "3329", "--policy", f"{UNUSABLE}:raises",
      says="raised ValueError"),
    C("check", "--config", NEMOTRON, "--encoder-len", "3329", "--policy", f"{UNUSABLE}:returns_none",
      says="returned a NoneType (None): expected a list or tuple of ints"),
    C("check", "--config", NEMOTRON, "--encoder-len", "3329", "--policy", f"{UNUSABLE}:negative",
      says="expected 2 non-negative ints"),
    C("check", "--encoder-len", "1", says="the following arguments are required: --config"),
    C("check", "--config", NEMOTRON, "--encoder-len", "3329", "--policy", "mrv2-prefix", status=1,
      says="policy:"),
    C("check", "--config", NEMOTRON, "--encoder-len", "3329", status=0, says="policy:"),
    C("check", "--engine", "sglang==0.5.23", says="--context-len, --kv-capacity, --requests: required with"),
    C("check", "--config", NEMOTRON, "--startup", "none", says="--startup needs --engine vllm"),
    C("check", "--engine", "vllm==0.25.0", "--config", NEMOTRON, "--startup", "abc",
      says="--startup='abc': must be comma-separated capture sizes"),
    C("check", "--engine", "vllm==0.25.0", "--config", NEMOTRON, "--startup", "0",
      says="--startup=0: a capture size must be in 1..max_num_batched_tokens"),
    C("check", "--engine", "vllm==0.25.0", "--config", NEMOTRON, "--startup", "none", "--encoder-len", "5",
      says="--startup and --encoder-len"),
    C("check", "--engine", SGLANG_TREE, "--startup", "none", *SGLANG_BATCH,
      says="--startup none: does not apply with --engine sglang@"),
    C("check", "--engine", "vllm==0.25.0", *SGLANG_BATCH, says="--context-len 64: does not apply with --engine vllm==0.25.0"),
    C("check", "--engine", SGLANG_TREE, "--encoder-len", "5", *SGLANG_BATCH, says="--encoder-len 5: does not apply with --engine sglang@"),
    C("check", "--engine", "sglang==abc", *SGLANG_BATCH, says="sglang==abc: not a release version"),
    C("check", "--engine", "sglang@{d}", *SGLANG_BATCH, says="has no sglang package"),
    C("check", "--engine", TRT_TREE, says="--config, --encoder-len: required with --engine tensorrt_llm@"),
    C("check", "--engine", TRT_TREE, *SGLANG_BATCH, says="--context-len 64: does not apply with --engine tensorrt_llm@"),
    C("check", "--engine", TRT_TREE, "--policy", "v1", "--config", WHISPER_POOL, "--encoder-len", "1500", says="--policy v1: does not apply with --engine tensorrt_llm@"),
    C("check", "--engine", "tensorrt_llm@{d}", "--config", WHISPER_POOL, "--encoder-len", "1500", says="has no tensorrt_llm package"),
    C("check", "--engine", "tensorrt_llm@{d}/trt-nofunc", "--config", WHISPER_POOL, "--encoder-len", "1500", says="KvCacheCreator has no _get_cross_kv_cache_layout"),
    C("check", "--engine", TRT_TREE, "--config", WHISPER_POOL, "--encoder-len", "1000", says="whisper-large-v3's encoder emits exactly 1500 tokens"),
    C("check", "--engine", TRT_TREE, "--config", WHISPER_POOL, "--encoder-len", "15,15", says="one integer with --engine"),
    C("check", "--engine", TRT_TREE, "--config", '{"family": "gpt2"}', "--encoder-len", "5", says="must be one of whisper-large-v3"),
    C("check", "--engine", SGLANG_TREE, "--context-len", "64", "--kv-capacity", "64", "--requests", "60:3:4",
      says="not admitted by SGLang"),
    C("check", "--engine", SGLANG_TREE, "--context-len", "64", "--kv-capacity", "64", "--requests", "5:3:3",
      says="d must be prompt + 1"),
    C("check", "--engine", SGLANG_TREE, "--context-len", "64", "--kv-capacity", "64", "--requests", "5:3:6:2",
      says="a cached prefix is 0, or covers the encoder"),
    C("check", "--engine", SGLANG_TREE, "--context-len", "x" * 40, "--kv-capacity", "64", "--requests", "5:3:6",
      says="--context-len"),
    # check's start-up options (SGLang's CUDA-graph capture batches)
    C("check", "--cuda-graph-bs", "1", says="--cuda-graph-bs 1: applies only with --engine sglang==X or sglang@PATH"),
    C("check", "--engine", SGLANG_TREE, "--context-len", "64", "--cuda-graph-bs", "4", "--max-running-requests", "2",
      says="every capture size must be at most --max-running-requests (2)"),
    C("check", "--engine", SGLANG_TREE, "--context-len", "64", "--cuda-graph-bs", "1", "--requests", "5:3:6",
      says="--requests 5:3:6: does not apply with --cuda-graph-bs"),
    C("check", "--engine", SGLANG_TREE, "--cuda-graph-bs", "1", says="--context-len: required with --engine"),
    C("check", "--engine", SGLANG_TREE, "--context-len", "64", "--cuda-graph-bs", "0", says="--cuda-graph-bs"),
    # report ------------------------------------------------------------------
    C("report", says="the following arguments are required: --engine"),
    C("report", "--engine", "mrv2", says="report takes vllm==X, vllm@PATH, sglang==X, sglang@PATH or tensorrt_llm@PATH"),
    C("report", "--engine", "vllm", says="report takes vllm==X, vllm@PATH, sglang==X, sglang@PATH or tensorrt_llm@PATH"),
    C("report", "--engine", "tensorrt_llm==1.2.1", says="TensorRT-LLM is taken as a source tree only"),
    C("report", "--engine", "tensorrt_llm@{d}", says="has no tensorrt_llm package"),
    C("report", "--engine", TRT_TREE, "--releases", "1.2.1", says="TensorRT-LLM has no release table"),
    C("report", "--engine", TRT_TREE, "-k", "capacity", says="-k capacity: does not apply with --engine tensorrt_llm@"),
    C("report", "--engine", "sglang@{d}", says="has no sglang package"),
    C("report", "--engine", SGLANG_TREE, "--fix", "{d}/missing.patch", says="missing.patch: is not a file"),
    C("report", "--engine", SGLANG_TREE, "--fix", "{d}/list.json", says="does not apply to sglang@"),
    C("report", "--engine", SGLANG_TREE, "--bisect", "HEAD", says="must be GOOD..BAD"),
    C("report", "--engine", SGLANG_TREE, "--bisect", "nope..HEAD", says="nope is not a commit of"),
    C("report", "--engine", SGLANG_TREE, "--bisect", "HEAD~1...HEAD", says="must be GOOD..BAD (two revisions of the checkout, two dots)"),
    C("report", "--engine", SGLANG_TREE, "--bisect", "v0.0-none..HEAD", says="v0.0-none is not a commit of"),
    C("report", "--engine", SGLANG_TREE, "--bisect", "HEAD^{tree}..HEAD", says="HEAD^{tree} is not a commit of"),
    C("report", "--engine", "sglang@{d}", "--bisect", "HEAD~1..HEAD", says="is not a git checkout"),
    C("report", "--engine", "sglang==0.5.23", "--bisect", "HEAD~1..HEAD", says="needs --engine NAME@PATH"),
    C("report", "--engine", SGLANG_TREE, "--releases", "abc", says="'abc' is not a release version"),
    C("report", "--engine", SGLANG_TREE, "--release-table", "{d}/list.json", says="is an audit file: vLLM only"),
    C("report", "--engine", "vllm@{d}", "--release-table", "{d}/list.json", says="--release-table='[1, 2]': must hold a JSON object"),
    C("report", "--engine", "vllm@{d}", "--release-table", "{d}/gpt2.json", says="must be the JSON `crossattn-sizing audit --json` writes"),
    C("report", "--engine", SGLANG_TREE, "--out", "/dev/null", says="/dev/null"),
    # fuzz --------------------------------------------------------------------
    C("fuzz", "--minutes", "nan", says="--minutes nan: must be a number of minutes in (0, 10080]"),
    C("fuzz", "--minutes", "inf", says="--minutes inf: must be a number of minutes"),
    C("fuzz", "--minutes", "1e300", says="--minutes 1e+300: must be a number of minutes"),
    C("fuzz", "--minutes", "0", says="--minutes 0.0: must be a number of minutes"),
    C("fuzz", "--minutes", "-1", says="--minutes -1.0: must be a number of minutes"),
    C("fuzz", "--minutes", "soon", says="argument --minutes: invalid float value"),
    C("fuzz", "--max-rounds", "0", says="--max-rounds 0: must be >= 1"),
    C("fuzz", "--examples-per-round", "0", says="--examples-per-round 0: must be >= 1"),
    C("fuzz", "--seed", "-1", says="--seed -1: must be >= 0"),
    C("fuzz", "--regressions", "{d}/a-file", says="is a file; name a folder"),
    C("fuzz", "--db", "{d}/a-file", says="is a file; name a folder"),
    C("fuzz", "--db", "{d}/a-file/db", says="a-file is a file, not a folder"),
    C("fuzz", "--json", "{d}", says="is a folder; name a file to write"),
    C("fuzz", "--policy", f"{UNUSABLE}:no_argument", says="raised TypeError"),
    C("fuzz", "--impl", "nope", says="unknown implementation 'nope'"),
    # prove -------------------------------------------------------------------
    C("prove", "--policy", f"{UNUSABLE}:raises", *SMALL_DOMAIN, says="raised ValueError"),
    C("prove", "--policy", f"{UNUSABLE}:floats", *SMALL_DOMAIN, says="expected 2 non-negative ints"),
    C("prove", "--policy", "mrv2", "--block-size", "1-512", "--max-model-len", "1-16000000",
      "--encoder-budget", "1-16000000", says="pass --force"),
    C("prove", "--policy", "mrv2", "--block-size", "0", says="--block-size"),
    C("prove", "--policy", "mrv2", "--dcp", "two", says="--dcp"),
    C("prove", "--policy", "mrv2", "--examples", "-1", says="--examples '-1': must be an integer >= 0"),
    C("prove", "--policy", "mrv2", "--max-model-len", "1-100000000000", says="--max-model-len"),
    C("prove", "--policy", "mrv2", "--json", "{d}", *SMALL_DOMAIN, says="is a folder; name a file to write"),
    C("prove", "--policy", "mrv2", "--json", "/proc/version", *SMALL_DOMAIN, says="cannot be written"),
    C("prove", "--symbolic", "--policy", f"{UNUSABLE}:raises", says="a module:attr policy has no symbolic form"),
    C("prove", "--symbolic", "--policy", "mrv2", "--block-size", "16", says="is an option of the bounded proof"),
    C("prove", *SMALL_DOMAIN, says="the following arguments are required: --policy"),
    C("prove", "--policy", "mrv2", *SMALL_DOMAIN, status=0, says="domain:"),
    # reproduce ---------------------------------------------------------------
    C("reproduce", "mllama-mixed-batch", says="mllama-mixed-batch takes sglang==X or sglang@PATH"),
    C("reproduce", "bart", "--engine", TRT_TREE, says="reproduce takes whisper with --engine"),
    C("reproduce", "whisper", "--engine", TRT_TREE, "--max-model-len", "448", says="--max-model-len 448: does not apply with --engine tensorrt_llm@"),
    C("map", "--engine", TRT_TREE, "--out", "{d}/m.png", says="map cannot run tensorrt_llm"),
    C("reproduce", "whisper", "--engine", "tensorrt_llm@{d}", says="has no tensorrt_llm package"),
    C("reproduce", "whisper", "--engine", SGLANG_TREE, says="SGLang reproduces mllama-mixed-batch only"),
    C("reproduce", "mllama-mixed-batch", "--engine", SGLANG_TREE, "--encoder-len", "5", says="--encoder-len 5: does not apply with --engine sglang@"),
    C("fuzz", "--engine", SGLANG_TREE, says="fuzz cannot run sglang"),
    C("audit", "--engine", SGLANG_TREE, "--read-only", says="--read-only reads vLLM's sizing from the source"),
    C("check", "--engine", SGLANG_TREE, "--in-process", *SGLANG_BATCH, says="SGLang's code always runs in its own worker process"),
    C("map", "--engine", "vllm==0.25.0", "--context-len", "64", "--out", "{d}/m.png", says="--context-len 64: does not apply with --engine vllm==0.25.0"),
    C("reproduce", "--config", "{d}/gpt2.json", "--encoder-len", "3000", says="'gpt2' is decoder-only"),
    C("reproduce", "--config", "{d}/llama.json", "--encoder-len", "3000", says="'llama' is decoder-only"),
    C("reproduce", "--config", "{d}/whisper-abc.json", says="max_source_positions='abc'"),
    C("reproduce", "--config", "{d}/whisper-false.json", says="is_encoder_decoder='false': must be true or false"),
    C("reproduce", "--config", "{d}/nemotron-big.json", says="image_size='big'"),
    C("reproduce", "--config", "{d}/bart-m.json", says="max_position_embeddings=0: must be a positive integer"),
    C("reproduce", "--config", "{d}/nonutf8.json", says="is not UTF-8 text"),
    C("reproduce", "--config", "{d}/deep.json", says="nested too deeply"),
    C("reproduce", "--config", json.dumps({"model_type": "no-such-model"}), says="transformers cannot build"),
    C("reproduce", "--config", json.dumps({"d_model": 4}), says="neither a transformers config"),
    C("reproduce", "nemotron-parse", "--image-size", "10x10", says="image_size='10x10': must be at least"),
    C("reproduce", "nemotron-parse", "--image-size", "big", says="--image-size='big'"),
    C("reproduce", "nemotron-parse", "--max-model-len", "abc", says="--max-model-len 'abc': must be an integer"),
    C("reproduce", "bart", "--encoder-len", "5000", says="encoder_len=5000: must be 1..1024"),
    C("reproduce", "whisper", "--policy", f"{UNUSABLE}:raises", says="raised ValueError"),
    C("reproduce", "t5", says="model='t5': must be one of"),
    C("reproduce", says="give a model name or --config FILE"),
    C("reproduce", "whisper", "--impl", "nope", says="unknown implementation 'nope'"),
    C("reproduce", "nemotron-parse", "--policy", "mrv2-prefix", status=1, says="reproduce nemotron-parse"),
    C("reproduce", "--config", "{d}/nemotron-square.json", status=0, says="reproduce"),
    C("reproduce", "whisper", status=0, says="reproduce whisper"),
    # audit (offline: nothing is downloaded) ------------------------------------
    C("audit", says="give at least one --engine vllm==X or --engine vllm@PATH"),
    C("audit", "--engine", "vllm@{d}/missing", says="missing"),
    C("audit", "--engine", "vllm==0.24.0", "--offline", "--cache-dir", "{d}/empty-cache", says="0.24.0"),
    C("audit", "--engine", "vllm==latest", "--offline", says="latest"),
    C("audit", "--engine", "0.24.0", says="audit takes vllm==X (a release, e.g. vllm==0.24.0) or vllm@PATH"),
    C("audit", "--engine", "sglang==0.5.0", says="sglang==0.5.0: older than the first release the harness runs (0.5.10"),
    C("audit", "--engine", "sglang==abc", says="sglang==abc: not a release version"),
    C("audit", "--engine", "sglang", "--engine", "vllm==0.24.0", says="audit one engine at a time"),
    C("audit", "--engine", "sglang", "--json", "{d}/a.json", says="--json is written for vLLM releases only"),
    C("audit", "--engine", "sglang", "--runner", "v2", says="--runner names vLLM's model runners"),
    C("audit", "--vllm", "0.24.0", says="--vllm is no longer an option: use --engine vllm==X"),
    C("audit", "--vllm-path", "{d}", says="--vllm-path is no longer an option: use --engine vllm@PATH"),
    # every other retired spelling (docs/spec.md §1): refused, naming the one to type instead
    C("verify", "--profile", "ci", says="--profile is no longer an option: use --hypothesis-profile"),
    C("fuzz", "--workers", "2", says="--workers is no longer an option: use --jobs"),
    C("prove", "--policy", "mrv2", "--encoder-tokens", "5", says="--encoder-tokens is no longer an option: use --encoder-budget"),
    C("prove", "--policy", "mrv2", "--block-sizes", "16", says="--block-sizes is no longer an option: use --block-size"),
    C("prove", "--policy", "mrv2", "--kernel-block-sizes", "16", says="use --kernel-block-size"),
    C("reproduce", "whisper", "--max-num-encoder-input-tokens", "8", says="use --encoder-budget"),
    C("reproduce", "whisper", "--encoder-tokens", "8", says="--encoder-tokens is no longer an option: use --encoder-len"),
    C("check", "--config", NEMOTRON, "--encoder-lens", "3329", says="--encoder-lens is no longer an option: use --encoder-len"),
    C("pytest", CAPACITY, "--sizing-policy", "mrv2", status=4, says="--sizing-policy is no longer an option: use --policy",
      isolated=True),
    C("audit", "--engine", "vllm@{d}", "--json", "{d}", says="is a folder; name a file to write"),
    C("audit", "--engine", "vllm@{d}", "--runner", "v9", says="argument --runner: invalid choice"),
    # the pytest plugin ---------------------------------------------------------
    C("pytest", CAPACITY, "--policy", "nope", status=4, says="unknown sizing policy 'nope'", isolated=True),
    C("pytest", CAPACITY, "--policy", f"{UNUSABLE}:raises", status=4, says="raised ValueError",
      isolated=True),
    C("pytest", CAPACITY, "--policy", f"{UNUSABLE}:no_argument", status=4, says="raised TypeError",
      isolated=True),
    C("pytest", CAPACITY, "--impl", "nope", status=4, says="unknown implementation 'nope'", isolated=True),
    C("pytest", "properties/sglang_attention.py", status=4, isolated=True,
      says="properties/sglang_attention.py runs an SGLang tree's own backend: give --read-builder sglang==X"),
    C("pytest", CAPACITY, "--impl", "nowhere:x", status=4, says="does not import", isolated=True),
    # an engine spec is checked by resolve.check_engine_spec, in the same words as reproduce --engine
    C("pytest", CAPACITY, "--impl", "vllm==abc", status=4, says="--impl 'vllm==abc': not a release",
      isolated=True),
    C("pytest", CAPACITY, "--impl", "vllm@/nonexistent", status=4,
      says="--impl vllm@/nonexistent: /nonexistent has no vllm package", isolated=True),
    C("pytest", CAPACITY, "--device", "tpu", status=4, says="--device 'tpu': use one of cpu, cuda", isolated=True),
    C("pytest", CAPACITY, status=4, says="CROSSATTN_PROFILE='nope': unknown Hypothesis profile", isolated=True,
      env={"CROSSATTN_PROFILE": "nope"}),
    C("pytest", CAPACITY, status=4, says="regression file", isolated=True, env=BAD_REGRESSIONS),
    # --- issue 20: parsing, outputs, environment, messages (s3-inputs) ---
    # duplicate keys, integers with thousands of digits, bounds where a value becomes memory
    C("check", "--config", NEMOTRON[:-1] + ', "max_model_len": 4096}', "--encoder-len", "1", says="key='max_model_len': appears twice"),
    C("check", "--config", with_group(kind="cross")[:-3] + ', "kind": "full"}]}', "--encoder-len", "1", says="key='kind': appears twice"),
    C("check", "--config", "{d}/dup-key.json", "--encoder-len", "1", says="key='max_model_len': appears twice"),
    C("reproduce", "--config", "{d}/dup-key.json", says="key='max_model_len': appears twice"),
    C("check", "--config", "{d}/long-int.json", "--encoder-len", "1", says="JSON integers may have at most 30 digits"),
    C("check", "--config", NEMOTRON, "--encoder-len", "9" * 5000, says="--encoder-len='9999"),
    C("check", "--config", "{d}/long-value.json", "--encoder-len", "1", says="(5000002 characters): unknown field"),
    C("check", "--config", runner_config(max_num_reqs=10**9), "--encoder-len", "1", says="max_num_reqs=1000000000: must be <= 65536"),
    C("check", "--config", with_group(block_size=10**12), "--encoder-len", "1", says="block_size=1000000000000: must be <= 65536"),
    C("check", "--config", with_group(kernel_block_size=2**20), "--encoder-len", "1", says="kernel_block_size=1048576: must be <= 65536"),
    C("reproduce", "--config", "{d}/huge-reqs.json", says="max_num_reqs=1000000000: must be <= 65536"),
    C("reproduce", "nemotron-parse", "--block-size", str(10**9), says="--block-size 1000000000: must be <= 65536"),
    C("reproduce", "whisper", "--seed", str(2**64), says="--seed 18446744073709551616: must be <= 18446744073709551615"),
    C("reproduce", "whisper", "--seed", "9" * 5000, says="--seed '9999"),
    C("reproduce", "nemotron-parse", "--max-model-len", "9" * 5000, says="must be an integer of at most 30 digits"),
    C("verify", "--seed", str(2**64), says="--seed 18446744073709551616: must be <= 18446744073709551615"),
    C("verify", "--seed", "9" * 5000, says="--seed '9999"),
    C("verify", "--max-examples", "9" * 5000, says="at most 30 digits"),
    C("fuzz", "--seed", str(2**64), says="--seed 18446744073709551616: must be <= 18446744073709551615"),
    C("fuzz", "--max-rounds", "9" * 5000, says="argument --max-rounds: invalid int value"),
    C("fuzz", "--minutes", "9" * 5000, says="too long for a number"),
    C("prove", "--policy", "mrv2", "--chunk-size", str(10**12), *SMALL_DOMAIN, says="--chunk-size '1000000000000': must be an integer <= 16777216"),
    C("prove", "--policy", "mrv2", "--examples", str(10**12), *SMALL_DOMAIN, says="--examples '1000000000000': must be an integer <="),
    C("prove", "--policy", "mrv2", "--block-size", "9" * 5000, says="numbers may have at most 30 digits"),
    C("verify", "--policy", "p" * 100_000, says="unknown sizing policy 'ppp"),
    # check with no cross-attention group: no encoder tokens to judge
    C("check", "--config", runner_config(is_encoder_decoder=False, groups=[{"kind": "full", "block_size": 16}]), "--encoder-len", "1",
      says="the config has no cross-attention group"),
    C("check", "--config", runner_config(is_encoder_decoder=False, groups=[{"kind": "sliding_window", "block_size": 16}, {"kind": "mamba", "block_size": 64}]),
      "--encoder-len", "1,2", says="there are no encoder tokens to judge"),
    # two outputs naming one file; an output inside the regressions folder
    C("verify", "--json", "{d}/report.out", "--junit-xml", "{d}/report.out", says="report.out: names the same file as --json"),
    C("verify", "--json", "{d}/report.out", "--junit-xml", "{d}/out-regressions/../report.out", says="names the same file as --json"),
    C("audit", "--engine", "vllm@{d}/syntax-tree/vllm", "--json", "{d}/audit.out", "--markdown", "{d}/audit.out", says="audit.out: names the same file as --json"),
    C("verify", "--json", "{d}/out-regressions/report.json", says="lies in the regressions folder", env={"CROSSATTN_REGRESSIONS_DIR": "{d}/out-regressions"}),
    C("fuzz", "--regressions", "{d}/out-regressions", "--json", "{d}/out-regressions/summary.json", says="lies in the regressions folder"),
    C("prove", "--policy", "mrv2", "--json", "{d}/out-regressions/p.json", *SMALL_DOMAIN, says="lies in the regressions folder",
      env={"CROSSATTN_REGRESSIONS_DIR": "{d}/out-regressions"}),
    C("audit", "--engine", "vllm@{d}/syntax-tree/vllm", "--json", "{d}/out-regressions/a.json", says="lies in the regressions folder",
      env={"CROSSATTN_REGRESSIONS_DIR": "{d}/out-regressions"}),
    # environment variables are options too
    C("check", "--config", NEMOTRON, "--encoder-len", "1", says="CROSSATTN_DCP_TIMEOUT='abc': must be a number of seconds", env={"CROSSATTN_DCP_TIMEOUT": "abc"}),
    C("verify", says="CROSSATTN_DB='/dev/null': is not a folder", env={"CROSSATTN_DB": "/dev/null"}),
    C("fuzz", says="CROSSATTN_PROFILE='nope': unknown Hypothesis profile", env={"CROSSATTN_PROFILE": "nope"}),
    C("check", "--config", NEMOTRON, "--encoder-len", "1", says="CROSSATTN_OFFLINE='maybe': must be 1 or 0", env={"CROSSATTN_OFFLINE": "maybe"}),
    C("check", "--config", NEMOTRON, "--encoder-len", "1", says="CROSSATTN_ENGINE_WORKERS='0': must be a positive integer", env={"CROSSATTN_ENGINE_WORKERS": "0"}),
    C("check", "--config", NEMOTRON, "--encoder-len", "1", says="a-file': is not a folder (a file or device)", env={"CROSSATTN_REGRESSIONS_DIR": "{d}/a-file"}),
    C("verify", "--policy", "mrv2", "-k", "test_capacity", says="encoder_lens=5000: is not admitted by its config", isolated=True,
      env={"CROSSATTN_REGRESSIONS_DIR": "{d}/unadmitted-regressions"}),
    C("pytest", CAPACITY, status=4, says="encoder_lens=5000: is not admitted by its config", isolated=True,
      env={"CROSSATTN_REGRESSIONS_DIR": "{d}/unadmitted-regressions"}),
    C("pytest", CAPACITY, status=4, says="CROSSATTN_DCP_TIMEOUT='abc': must be a number of seconds", isolated=True, env={"CROSSATTN_DCP_TIMEOUT": "abc"}),
    C("pytest", CAPACITY, status=4, says="CROSSATTN_DCP_TIMEOUT='inf': must be a number of seconds", isolated=True, env={"CROSSATTN_DCP_TIMEOUT": "inf"}),
    C("pytest", CAPACITY, status=4, says="CROSSATTN_DB='/dev/null': is not a folder", isolated=True, env={"CROSSATTN_DB": "/dev/null"}),
    C("pytest", CAPACITY, status=4, says="a-file': is not a folder (a file or device)", isolated=True, env={"CROSSATTN_SHARED_DB": "{d}/a-file"}),
    C("pytest", CAPACITY, status=4, says="CROSSATTN_DEVICE='tpu': use one of cpu, cuda", isolated=True, env={"CROSSATTN_DEVICE": "tpu"}),
    C("pytest", CAPACITY, status=4, says="CROSSATTN_DCP_BACKEND='mpi': use one of", isolated=True, env={"CROSSATTN_DCP_BACKEND": "mpi"}),
    C("pytest", CAPACITY, "--hypothesis-profile", "ci", status=4, says="CROSSATTN_DB='/dev/null': is not a folder", isolated=True, env={"CROSSATTN_DB": "/dev/null"}),
    C("pytest", CAPACITY, "--dcp-timeout", "abc", status=4, says="--dcp-timeout 'abc': must be a number of seconds", isolated=True),
    C("pytest", CAPACITY, "--hypothesis-profile", "nope", status=4, says="--hypothesis-profile 'nope': unknown Hypothesis profile", isolated=True),
    # messages name what the user typed
    C("reproduce", "whisper", "--engine", "vllm==abc", says="--engine 'vllm==abc': not a release"),
    C("reproduce", "whisper", "--engine", "torch", says="--engine torch: names no engine the harness runs"),
    C("reproduce", "whisper", "--engine", "vllm@/nonexistent", says="--engine vllm@/nonexistent: "
      "/nonexistent has no vllm package"),
    C("audit", "--engine", "vllm@{d}/syntax-tree/vllm", status=3, says="sizing of vLLM releases"),
    # --- issue 20: hostile user code, signals, fleet (s3-hostile) ---
    # A policy at the start-up probe: it leaves, fakes a Ctrl-C, runs out of memory or stack, changes its config.
    *(C("check", "--config", NEMOTRON, "--encoder-len", "3329", "--policy", f"{UNUSABLE}:{policy}", says=says)
      for policy, says in (
        ("exits_zero", "exits_zero called sys.exit(0)"),
        ("exits_three", "called sys.exit(3)"),
        ("exits_with_text", "called sys.exit('policy gave up')"),
        ("raises_system_exit_130", "called sys.exit(130)"),
        ("raises_keyboard_interrupt", "raised KeyboardInterrupt though no Ctrl-C was pressed"),
        ("raises_memory_error", "raised MemoryError"),
        ("recurses", "raised RecursionError"),
        ("raises_unprintable", "<message that cannot be printed>"),
        ("mutates_config", "changed the RunnerConfig it was given (max_num_encoder_input_tokens=None -> 1)"),
        ("mutates_group", "(groups[1].block_size=16 -> 1)"),
        ("huge", "a width of 81 bits for group 0: a width is at most 2**40 entries"),
        ("digits", "a width of 16610 bits"),
    )),
    C("reproduce", "whisper", "--policy", f"{UNUSABLE}:exits_zero", says="called sys.exit(0)"),
    C("fuzz", "--policy", f"{UNUSABLE}:raises_keyboard_interrupt", says="raised KeyboardInterrupt though no Ctrl-C"),
    C("verify", "--policy", f"{UNUSABLE}:raises_system_exit_130", says="called sys.exit(130)"),
    # ... at import, and implementations at creation
    C("verify", "--policy", "tests.hostile_modules.exits_on_import:widths", says="does not import (it called sys.exit(0))"),
    C("verify", "--policy", "tests.hostile_modules.interrupts_on_import:widths", says="does not import (KeyboardInterrupt though no Ctrl-C"),
    C("prove", "--policy", "tests.hostile_modules.recurses_on_import:widths", *SMALL_DOMAIN, says="does not import (RecursionError"),
    C("verify", "--impl", "tests.unusable_impls:exits_on_creation", says="creating it for device cpu called sys.exit(0)"),
    C("fuzz", "--impl", "tests.unusable_impls:interrupts_on_creation", says="creating it for device cpu raised KeyboardInterrupt"),
    # ... right on the probe, misbehaving later: in a prove tile (exit 2 with the config, never a verdict)
    C("prove", "--policy", f"{UNUSABLE}:exits_zero_later", *SMALL_DOMAIN, says="called sys.exit(0) (called with one RunnerConfig: M=1"),
    C("prove", "--policy", f"{UNUSABLE}:interrupts_later", *SMALL_DOMAIN, says="raised KeyboardInterrupt though no Ctrl-C"),
    C("prove", "--policy", f"{UNUSABLE}:mutates_later", *SMALL_DOMAIN, says="changed the RunnerConfig it was given (max_model_len="),
    C("prove", "--policy", f"{UNUSABLE}:huge_later", *SMALL_DOMAIN, says="a width is at most 2**40 entries"),
    C("prove", "--policy", f"{UNUSABLE}:recurses_later", *SMALL_DOMAIN, says="replay: crossattn-sizing check"),
    C("prove", "--policy", f"{UNUSABLE}:memory_error_later", "--json", "{d}/prove-partial.json", *SMALL_DOMAIN, says="raised MemoryError"),
    C("prove", "--policy", f"{UNUSABLE}:too_small_later", *SMALL_DOMAIN, status=1, says="domain:"),
    # ... inside the property suite (verify, fuzz, the plugin)
    C("verify", "--policy", f"{UNUSABLE}:exits_zero_later", "-k", "test_capacity", says="called sys.exit(0)", isolated=True),
    C("verify", "--policy", f"{UNUSABLE}:interrupts_later", "-k", "test_capacity", says="raised KeyboardInterrupt though no Ctrl-C", isolated=True),
    C("verify", "--policy", f"{UNUSABLE}:mutates_later", "-k", "test_capacity", says="changed the RunnerConfig it was given", isolated=True),
    C("verify", "--policy", f"{UNUSABLE}:huge_later", "-k", "test_capacity", says="a width is at most 2**40 entries", isolated=True),
    C("fuzz", "--policy", f"{UNUSABLE}:exits_zero_later", "--max-rounds", "1", "-k", "test_capacity", "--db", "{d}/fuzz-db",
      "--regressions", "{d}/fuzz-regressions", says="called sys.exit(0)", isolated=True),
    C("verify", "--impl", "tests.unusable_impls:ExitsInSlotMapping", "-k", "test_slot_mapping", says="slot_mapping called sys.exit(0)", isolated=True),
    C("pytest", CAPACITY, "--policy", f"{UNUSABLE}:exits_zero", status=4, says="called sys.exit(0)", isolated=True),
    C("pytest", CAPACITY, "--policy", f"{UNUSABLE}:interrupts_later", status=4, says="raised KeyboardInterrupt though no Ctrl-C", isolated=True),
    C("pytest", CAPACITY, "--policy", f"{UNUSABLE}:mutates_later", status=4, says="changed the RunnerConfig", isolated=True),
    C("pytest", CAPACITY, "--policy", "tests.hostile_modules.exits_on_import:widths", status=4, says="does not import (it called sys.exit(0))", isolated=True),
    C("pytest", "properties/test_slot_mapping.py", "--impl", "tests.unusable_impls:ExitsInSlotMapping", status=4, says="slot_mapping called sys.exit(0)", isolated=True),
    # The suite: a folder that is not one, and a --pyargs name that names nothing (pytest's own line)
    C("verify", "--policy", "mrv2", says="is not the property suite (it has no test_capacity.py)", isolated=True, env={"CROSSATTN_PROPERTIES": "{d}"}),
    C("pytest", "--pyargs", "crossattn_sizing.no_such_suite", status=4, says="module or package not found: crossattn_sizing.no_such_suite", isolated=True),
    C("pytest", CAPACITY, "-p", "tests.without_torch", status=4, says="the property suite needs torch, which is not installed: pip install 'crossattn-sizing[all]'", isolated=True),
    # A property suite that holds no test is never "holds"
    C("verify", "--policy", "mrv2", says="has no test", isolated=True, env={"CROSSATTN_PROPERTIES": "{d}/empty-suite/properties"}),
    C("fuzz", "--max-rounds", "1", "--db", "{d}/fuzz-db", "--regressions", "{d}/fuzz-regressions", says="has no test", isolated=True,
      env={"CROSSATTN_PROPERTIES": "{d}/empty-suite/properties"}),
    # The fleet: checked before any worker starts
    C("fuzz", "--jobs", "100000", says="--jobs 100000: must be <= "),
    C("fuzz", "--jobs", "2", "--impl", "nope", says="unknown implementation 'nope'"),
    C("fuzz", "--jobs", "2", "--device", "cuda", says="--device cuda: no CUDA device is available"),
    C("fuzz", "--jobs", "2", "--impl", "tests.unusable_impls:exits_on_creation", says="called sys.exit(0)"),
    C("fuzz", "--jobs", "2", "--policy", f"{UNUSABLE}:exits_zero", says="called sys.exit(0)"),
    # --- issue 27: paths that block, outputs that land elsewhere, statuses that mean one thing ---
    # inputs that are FIFOs, devices or link loops: refused before anything opens them
    C("check", "--config", "{d}/fifo.json", "--encoder-len", "1", says="is a FIFO (named pipe), not a regular file"),
    C("check", "--config", "{d}/zero.json", "--encoder-len", "1", says="is a character device, not a regular file"),
    C("check", "--config", "{d}/loop", "--encoder-len", "1", says="/loop': is a symbolic link loop"),
    C("reproduce", "--config", "{d}/fifo.json", says="is a FIFO (named pipe), not a regular file"),
    C("verify", "--policy", "mrv2", "-k", "test_capacity", says="test_coverage-special.json='test_coverage-special.json': is a FIFO", isolated=True,
      env={"CROSSATTN_REGRESSIONS_DIR": "{d}/fifo-regressions"}),
    C("verify", "--policy", "mrv2", "-k", "test_capacity", says="test_coverage-special.json='test_coverage-special.json': is a character device", isolated=True,
      env={"CROSSATTN_REGRESSIONS_DIR": "{d}/zero-regressions"}),
    C("pytest", CAPACITY, status=4, says="is a FIFO (named pipe)", isolated=True, env={"CROSSATTN_REGRESSIONS_DIR": "{d}/fifo-regressions"}),
    C("pytest", CAPACITY, status=4, says="is a character device", isolated=True, env={"CROSSATTN_REGRESSIONS_DIR": "{d}/zero-regressions"}),
    # engine trees
    C("reproduce", "whisper", "--engine", "vllm@{d}/loop", says="/loop is a symbolic link loop (vllm@PATH takes a folder"),
    C("reproduce", "whisper", "--engine", "vllm@/dev/null", says="/dev/null is a character device, not a folder"),
    C("verify", "--impl", "vllm@{d}/fifo.json", says="is a FIFO (named pipe), not a folder"),
    C("audit", "--engine", "vllm@{d}/loop", says="/loop is a symbolic link loop (vllm@PATH takes a folder"),
    C("pytest", CAPACITY, "--impl", "vllm@{d}/loop", status=4, says="is a symbolic link loop", isolated=True),
    C("pytest", CAPACITY, "--policy", "vllm@/dev/null", status=4, says="is a character device", isolated=True),
    # outputs that are FIFOs, devices or link loops: never opened (a FIFO blocks), no side file beside a device
    C("verify", "--json", "{d}/fifo.json", says="fifo.json: is a FIFO (named pipe); name a regular file"),
    C("verify", "--markdown", "/dev/null", says="--markdown /dev/null: is a character device; name a regular file"),
    C("verify", "--junit-xml", "{d}/loop", says="/loop: is a symbolic link loop"),
    C("prove", "--policy", "mrv2", "--json", "/dev/null", *SMALL_DOMAIN, says="--json /dev/null: is a character device"),
    C("fuzz", "--json", "{d}/fifo.json", says="is a FIFO (named pipe)"),
    C("fuzz", "--regressions", "{d}/loop", says="/loop: is a symbolic link loop"),
    C("map", "--policy", "mrv2", "--out", "/dev/null", says="--out /dev/null: is a character device"),
    C("audit", "--engine", "vllm@{d}/syntax-tree/vllm", "--markdown", "{d}/zero.json", says="is a character device"),
    # offline means offline (an empty cache: refused naming the variable, never a download)
    C("audit", "--engine", "vllm==0.25.0", "--cache-dir", "{d}/empty-cache", says="empty-cache (CROSSATTN_OFFLINE=1)",
      env={"CROSSATTN_OFFLINE": "1"}),
    C("check", "--config", NEMOTRON, "--encoder-len", "3329", "--policy", "vllm==0.25.0", says="vllm==0.25.0 is not in the wheel cache",
      env={"CROSSATTN_OFFLINE": "1", "HOME": "{d}/empty-home"}),
    C("reproduce", "whisper", "--engine", "vllm==0.25.0", says="(CROSSATTN_OFFLINE=1)", env={"CROSSATTN_OFFLINE": "1", "HOME": "{d}/empty-home"}),
    C("verify", "--impl", "vllm==0.25.0", says="(CROSSATTN_OFFLINE=1)", env={"CROSSATTN_OFFLINE": "1", "HOME": "{d}/empty-home"}),
    # a cache that cannot be made: bad input, not a traceback with status 1
    C("check", "--config", NEMOTRON, "--encoder-len", "3329", "--policy", "vllm==0.25.0",
      says="the engine cache /proc/.cache/crossattn-sizing/engine cannot be written",
      env={"HOME": "/proc", "XDG_CACHE_HOME": ""}),  # blank reads as unset: the cache is HOME's (nox sets XDG)
    # two options that answer one question
    C("reproduce", "whisper", "--engine", "vllm==0.25.0", "--policy", "mrv2-prefix", says="--policy mrv2-prefix: does not apply with --engine vllm==0.25.0"),
    C("reproduce", "whisper", "--engine", "vllm==0.25.0", "--impl", "triton", says="--impl triton: does not apply with --engine vllm==0.25.0"),
    # a stdout that cannot be written: status 2 and one line, never 1 (a verdict) or a traceback
    # --- issue 35: code under test that patches its worker, crashes a reproduce, answers on meta ---
    C("check", "--config", NEMOTRON, "--encoder-len", "3329", "--policy", "tests.hostile_modules.patches_checker:widths",
      status=1, says="tests.hostile_modules.patches_checker:widths"),
    C("reproduce", "nemotron-parse", "--impl", "tests.hostile_code:ExitsInSlotMapping", status=1,
      says="reproduce nemotron-parse under sizing policy"),
    C("verify", "--impl", "tests.hostile_code:ReturnsMeta", "--max-examples", "1", "-k", "test_cross_attention_matches_dense",
      status=1, says="crossattn-sizing verify", isolated=True),
    *(C(*args, says=f"standard output cannot be written ({why})", stdout=kind)
      for kind, why in (("full", "No space left on device"), ("closed", "Broken pipe"))
      for args in (("check", "--config", NEMOTRON, "--encoder-len", "3329"),
                   ("check", "--config", NEMOTRON, "--encoder-len", "3329", "--policy", "mrv2-prefix"),
                   ("prove", "--policy", "mrv2", *SMALL_DOMAIN),
                   ("reproduce", "whisper"),
                   ("verify", "--policy", "mrv2", "-k", "test_capacity", "--max-examples", "5"))),
    # --- issue 35: one precedence rule (option > CROSSATTN_* variable > default, docs/settings.md) ---
    # verify reads CROSSATTN_PROFILE now: an unknown one is refused, even under an option that overrides it
    C("verify", says="CROSSATTN_PROFILE='nope': unknown Hypothesis profile", env={"CROSSATTN_PROFILE": "nope"}),
    C("verify", "--hypothesis-profile", "dev", says="CROSSATTN_PROFILE='nope': unknown Hypothesis profile", env={"CROSSATTN_PROFILE": "nope"}),
    # a bad value a variable gave is told as the variable's
    C("check", "--config", NEMOTRON, "--encoder-len", "1", says="unknown sizing policy 'nope'", env={"CROSSATTN_SIZING_POLICY": "nope"}),
    C("prove", *SMALL_DOMAIN, says="(the value of CROSSATTN_SIZING_POLICY)", env={"CROSSATTN_SIZING_POLICY": "nope"}),
    C("verify", "--policy", "mrv2", says="unknown implementation 'nope': use one of torch, triton or module:attr (the value of CROSSATTN_IMPL)", env={"CROSSATTN_IMPL": "nope"}),
    C("fuzz", says="CROSSATTN_DEVICE='tpu': use one of cpu, cuda", env={"CROSSATTN_DEVICE": "tpu"}),
    C("prove", *SMALL_DOMAIN, says="the following arguments are required: --policy (or CROSSATTN_SIZING_POLICY)"),
    # reproduce --engine overrides the variables (an option), but still refuses a typed --policy
    C("reproduce", "whisper", "--engine", "vllm==0.25.0", "--policy", "mrv2-prefix", says="--policy mrv2-prefix: does not apply with --engine vllm==0.25.0", env={"CROSSATTN_SIZING_POLICY": "v1"}),
    C("verify", "--in-process=1", says="argument --in-process/--no-in-process: ignored explicit argument '1'"),
    # --- issue 45: an option that takes one value is given once (argparse kept the last, silently) ---
    C("verify", "--engine", "vllm==0.24.0", "--engine", SGLANG_TREE, says="--engine given twice (vllm==0.24.0, then sglang@"),
    C("check", "--engine", SGLANG_TREE, *SGLANG_BATCH, "--engine", "vllm==0.25.0", says="--engine given twice (sglang@"),
    C("report", "--engine", "vllm==0.24.0", "--engine", "vllm==0.25.0", says="--engine given twice (vllm==0.24.0, then vllm==0.25.0)"),
    C("reproduce", "whisper", "--policy", "mrv2", "--policy=v1", says="--policy given twice (mrv2, then v1): it takes one value"),
    C("verify", "--seed", "1", "--seed", "2", says="--seed given twice (1, then 2)"),
    C("prove", "--policy", "mrv2", *SMALL_DOMAIN, "--no-progress", says="--no-progress given twice: give it once"),
    C("verify", "--in-process", "--no-in-process", says="--no-in-process given after --in-process: give one of them, once"),
    # the pytest plugin's own options, read once more from its command line (pytest's parser keeps the last)
    C("pytest", CAPACITY, "--policy", "v1", "--policy=mrv2", status=4, isolated=True,
      says="--policy given twice (v1, then mrv2): it takes one value; give it once"),
    C("pytest", CAPACITY, "--record-regressions", "--no-record-regressions", status=4, isolated=True,
      says="--no-record-regressions given after --record-regressions: give one of them, once"),
    # --- issue 45: a vllm@PATH tree whose sizing never answers fails within the call deadline (exit 1), typed or
    # from the variable, its worker and all it started ended (tests/test_engine_deadline.py asserts the line) ---
    C("check", "--engine", "vllm@{d}/hanging-sizing", "--call-timeout", "2", "--config", NEMOTRON, "--encoder-len", "3329",
      status=1, says="policy:"),
    C("prove", "--policy", "vllm@{d}/hanging-sizing", *SMALL_DOMAIN, status=1, says="domain: 4,000 configs",
      env={"CROSSATTN_CALL_TIMEOUT": "2"}),
]
"""Every row; the report and the test read the same list."""


PROGRESS_PREFIXES = ("verify: policy ", "fuzz: round ", "note: policy ")
"""Progress lines the commands print to a non-terminal stderr (and prove's note on how it asks
a policy); not part of an answer."""


def answer_lines(stderr: str) -> list[str]:
    """stderr without blank lines and progress lines: what the command said to the user."""
    return [line for line in stderr.splitlines() if line.strip() and not line.startswith(PROGRESS_PREFIXES)]


def first_line(stdout: str, stderr: str) -> str:
    """The first line a user reads: the error line if there is one, else the report's first line."""
    said = answer_lines(stderr)
    # pytest's argparse usage error starts with its usage banner ("ERROR: usage: ..."); the line after names the error
    errors = [line for line in said if "error:" in line and not line.startswith("ERROR: usage:")]
    errors = errors or [line for line in said if line.startswith("ERROR")]
    if errors:
        return errors[0].strip()
    shown = [line for line in stdout.splitlines() if line.strip()]
    return (shown or said or [""])[0].strip()


def command_line(case: Case, d: Path) -> list[str]:
    """The process a user would start for this row."""
    import sys

    if case.command == "pytest":
        return [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *case.argv(d)[1:]]
    return [sys.executable, "-m", "crossattn_sizing", *case.argv(d)]


def run_isolated(case: Case, d: Path) -> tuple[int, str, str]:
    """Run a row in a fresh process (its own process group, killed however the run ends)."""
    from tests.processes import run

    env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", **case.environ(d)}
    if case.stdout:
        return run_with_broken_stdout(case, d, env)
    done = run(command_line(case, d), env=env)
    return done.returncode, done.stdout, done.stderr


def run_with_broken_stdout(case: Case, d: Path, env: dict[str, str]) -> tuple[int, str, str]:
    """A row whose stdout is /dev/full, or a pipe whose reader closed before the child wrote."""
    from tests.processes import run_to_broken_stdout

    done = run_to_broken_stdout(command_line(case, d), case.stdout, env)
    return done.returncode, done.stdout, done.stderr
