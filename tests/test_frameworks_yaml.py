"""The strict YAML subset: what it reads (the same values PyYAML's safe_load gives), what it refuses (with line and
column), and our YAML / TOML writers (read back identically by our parser, PyYAML and tomllib)."""

import math
import tomllib

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from zerocalc.frameworks import FrameworkConfigError, parse_yaml
from zerocalc.frameworks.emitters import dump_toml, dump_yaml
from zerocalc.frameworks.yaml_subset import MAX_DEPTH, YamlError


def test_what_accelerate_writes():
    text = ("compute_environment: LOCAL_MACHINE\ndebug: false\ndowncast_bf16: 'no'\nfsdp_config:\n"
            "  fsdp_sharding_strategy: FULL_SHARD   # comment\n  fsdp_min_num_params: 1e8\n"
            "gpu_ids: all\nmain_process_port: 29500\ntpu_env: []\ncommands: null\nratio: .5\n"
            "list:\n- a\n- {k: v, n: 1}\n- - x\n  - 'y'\nmixed_precision: no\nquoted: \"t\\tab \\u00e9\"\n")
    assert parse_yaml(text) == {
        "compute_environment": "LOCAL_MACHINE", "debug": False, "downcast_bf16": "no",
        "fsdp_config": {"fsdp_sharding_strategy": "FULL_SHARD", "fsdp_min_num_params": "1e8"},
        "gpu_ids": "all", "main_process_port": 29500, "tpu_env": [], "commands": None, "ratio": 0.5,
        "list": ["a", {"k": "v", "n": 1}, ["x", "y"]], "mixed_precision": False, "quoted": "t\tab \u00e9"}


@pytest.mark.parametrize("text, line, col, what", [
    ("a: &anchor 1\n", 1, 4, "anchors"),
    ("a: 1\nb: *anchor\n", 2, 4, "aliases"),
    ("a: !!python/object:os.system x\n", 1, 4, "tags"),
    ("a: |\n  text\n", 1, 4, "block scalars"),
    ("a: 1\n---\nb: 2\n", 2, 1, "several documents"),
    ("%YAML 1.1\n---\na: 1\n", 1, 1, "directives"),
    ("a: 1\na: 2\n", 2, 1, "duplicate key"),
    ("a:\n\tb: 1\n", 2, 1, "tabs"),
    ("a: 'unclosed\n", 1, 4, "unclosed quote"),
    ("a: b\n  c\n", 2, 3, "multi-line"),
    ("a: [1, [2]]\n", 1, 8, "nested flow"),
    ("a: 2024-01-02\n", 1, 4, "date"),
    ("a: 1:30\n", 1, 4, "base-60"),
    ("<<: {a: 1}\n", 1, 1, "merge keys"),
    ("? a\n: b\n", 1, 1, "complex keys"),
    ("a: b: c\n", 1, 4, "mapping cannot start here"),
    ("a: \x07\n", 1, 4, "non-printable"),
])
def test_refusals_name_line_and_column(text, line, col, what):
    with pytest.raises(YamlError) as err:
        parse_yaml(text)
    assert (err.value.line, err.value.column) == (line, col) and what in err.value.value
    assert isinstance(err.value, FrameworkConfigError) and err.value.field == "config"


def test_alias_bombs_and_size_and_depth_are_refused():
    bomb = "a: &a [x, x]\nb: &b [*a, *a]\nc: &c [*b, *b]\n"
    with pytest.raises(YamlError):
        parse_yaml(bomb)
    with pytest.raises(FrameworkConfigError):
        parse_yaml("a: " + "x" * 1_000_001)
    deep = "".join(" " * (2 * i) + f"k{i}:\n" for i in range(MAX_DEPTH + 3)) + " " * (2 * (MAX_DEPTH + 3)) + "v: 1\n"
    with pytest.raises(YamlError) as err:
        parse_yaml(deep)
    assert "nesting" in err.value.value


def test_empty_and_scalar_documents():
    assert parse_yaml("") is None and parse_yaml("# only a comment\n---\n") is None
    assert parse_yaml("just text") == "just text"
    assert parse_yaml(b"\xef\xbb\xbfa: 1") == {"a": 1}


# --- the same values as PyYAML's safe_load on everything we accept --------------------------------------------------
FRAGMENTS = ["a", "key", "- ", "-", ": ", ":", " ", "  ", "\n", "\n  ", "\n- ", "'", '"', "''", "#", " #c", "[",
             "]", "{", "}", ",", "1", "0x1", "07", "1.5", ".inf", "~", "null", "yes", "No", "on", "\\n", "\\", "&a",
             "*a", "!t", "|", ">", "---", "...", "?", "%", "@", "\t", "é", "1_0", "-1", "+.5", "0b1", "x y", "<<", "="]


def same(a, b):
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


@pytest.fixture(scope="module")
def yaml():
    return pytest.importorskip("yaml", reason="PyYAML is the reference (transformers and accelerate install it)")


@settings(max_examples=1500, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.sampled_from(FRAGMENTS), min_size=1, max_size=12).map("".join))
@example(text="--- \t")                 # found by this test: a tab after '---' is a ScannerError in PyYAML
@example(text="--- # c\t")              # ... but not inside the comment
def test_accepted_documents_read_as_pyyaml_reads_them(yaml, text):
    try:
        ours = parse_yaml(text)
    except FrameworkConfigError:
        return                                          # a subset may refuse more
    assert same(ours, yaml.safe_load(text)), text


# --- writers --------------------------------------------------------------------------------------------------------
scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**20, 10**20),
                    st.floats(allow_nan=False, allow_infinity=True), st.text(max_size=12),
                    st.sampled_from(["no", "yes", "1", "1e3", "on", "~", "2024-01-01", "a: b", "#x", "- x", "'q'"]))
keys = st.one_of(st.from_regex(r"[a-z_][a-z0-9_]{0,10}", fullmatch=True), st.sampled_from(["no", "1", "a b"]))
trees = st.recursive(st.dictionaries(keys, scalars, max_size=4),
                     lambda inner: st.dictionaries(keys, st.one_of(scalars, inner, st.lists(scalars, max_size=3)),
                                                   max_size=4), max_leaves=12)


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(trees)
def test_dump_yaml_reads_back_identically(tree):
    text = dump_yaml(tree, ["a comment"])
    assert same(parse_yaml(text) or {}, tree)


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(trees)
def test_pyyaml_reads_dump_yaml_identically(yaml, tree):
    assert same(yaml.safe_load(dump_yaml(tree, ["a comment"])) or {}, tree)


tables = st.dictionaries(st.from_regex(r"[a-z_]{1,8}", fullmatch=True),
                         st.dictionaries(st.text(min_size=1, max_size=8),
                                         st.one_of(st.booleans(), st.integers(-2**63, 2**63 - 1),
                                                   st.floats(allow_nan=False), st.text(max_size=12),
                                                   st.lists(st.integers(0, 9), max_size=3)), max_size=4),
                         max_size=3)


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(tables)
def test_dump_toml_reads_back_identically(data):
    assert tomllib.loads(dump_toml(data, ["a comment"])) == data
