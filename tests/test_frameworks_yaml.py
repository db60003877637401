"""accelerate's YAML through PyYAML (zerocalc/frameworks/accelerate/document.py): what it reads is exactly what
yaml.safe_load reads (accelerate's commands/config/config_args.py loads configs with it), what it refuses is
refused by the loader itself with the line and column, and the exports' writers read back identically (YAML by
PyYAML's safe_load, TOML by tomllib)."""

import math
import sys
import time
import tomllib

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from zerocalc.frameworks import FrameworkConfigError, import_accelerate
from zerocalc.frameworks.accelerate import document
from zerocalc.frameworks.accelerate.document import (MAX_DEPTH, MAX_NODES, MAX_YAML_CHARS, YamlError, dump_yaml,
                                                     load_yaml)
from zerocalc.frameworks.emitters import dump_toml


def test_what_accelerate_writes_reads_as_safe_load_reads_it():
    text = ("compute_environment: LOCAL_MACHINE\ndebug: false\ndowncast_bf16: 'no'\nfsdp_config:\n"
            "  fsdp_sharding_strategy: FULL_SHARD   # comment\n  fsdp_min_num_params: 1e8\n"
            "gpu_ids: all\nmain_process_port: 29500\ntpu_env: []\ncommands: null\nratio: .5\n"
            "list:\n- a\n- {k: v, n: 1}\n- - x\n  - 'y'\nmixed_precision: no\nquoted: \"t\\tab \\u00e9\"\n"
            "octal: 010\nhex: 0x1F\nsexagesimal: 1:30\nblock: |\n  two\n  lines\n<<: {merged: 1}\n")
    expected = {
        "compute_environment": "LOCAL_MACHINE", "debug": False, "downcast_bf16": "no",
        "fsdp_config": {"fsdp_sharding_strategy": "FULL_SHARD", "fsdp_min_num_params": "1e8"},   # YAML 1.1: a string
        "gpu_ids": "all", "main_process_port": 29500, "tpu_env": [], "commands": None, "ratio": 0.5,
        "list": ["a", {"k": "v", "n": 1}, ["x", "y"]], "mixed_precision": False, "quoted": "t\tab \u00e9",
        "octal": 8, "hex": 31, "sexagesimal": 90, "block": "two\nlines\n", "merged": 1}
    assert load_yaml(text) == expected == yaml.safe_load(text)


@pytest.mark.parametrize("text, line, col, what", [
    ("a: &anchor 1\n", 1, 4, "anchors are not read"),
    ("a: 1\nb: *anchor\n", 2, 4, "aliases are not read"),
    ("a: !!python/object:os.system x\n", 1, 4, "tags are not read (!!python/object:os.system)"),
    ("a: !!str 1\n", 1, 4, "tags are not read (!!str)"),
    ("a: ! x\n", 1, 4, "tags are not read (!)"),
    ("a: 1\n---\nb: 2\n", 2, 1, "a second document"),
    ("a: 1\na: 2\n", 2, 1, "duplicate key 'a'"),
    ("x: {a: 1, a: 2}\n", 1, 11, "duplicate key 'a'"),
    ("a: 2024-01-02\n", 1, 4, "dates are not read"),
    ("a:\n\tb: 1\n", 2, 1, "'\\t'"),                 # PyYAML's own scanner errors, at its mark
    ("a: 'unclosed\n", 2, 1, "end of stream"),
    ("b: [1, 2\n", 2, 1, "expected ',' or ']'"),
    ("a: \x07\n", 1, 4, "#x0007"),                  # PyYAML's Reader: a non-printable character
])
def test_refusals_name_line_and_column(text, line, col, what):
    with pytest.raises(YamlError) as err:
        load_yaml(text)
    assert (err.value.line, err.value.column) == (line, col) and what in err.value.value
    assert isinstance(err.value, FrameworkConfigError) and err.value.field == "config"


def test_alias_bombs_depth_nodes_and_size_are_refused_before_the_work():
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{n}: &{n} [{', '.join(['*' + p] * 9)}]\n" for p, n in zip("abcdefgh", "bcdefghi"))
    started = time.process_time()
    with pytest.raises(YamlError, match="anchors are not read"):
        load_yaml(bomb)
    deep = "".join(" " * (2 * i) + f"k{i}:\n" for i in range(MAX_DEPTH + 3)) + " " * (2 * (MAX_DEPTH + 3)) + "v: 1\n"
    with pytest.raises(YamlError, match=f"nesting deeper than {MAX_DEPTH}"):
        load_yaml(deep)
    with pytest.raises(YamlError, match=f"nesting deeper than {MAX_DEPTH}"):
        load_yaml("[" * 10_000 + "]" * 10_000)
    with pytest.raises(YamlError, match=f"more than {MAX_NODES:,} values"):
        load_yaml("".join(f"k{i}: {i}\n" for i in range(MAX_NODES)))
    with pytest.raises(FrameworkConfigError, match=f"at most {MAX_YAML_CHARS:,} characters"):
        load_yaml("a: " + "x" * MAX_YAML_CHARS)
    with pytest.raises(FrameworkConfigError, match="at most 1,000,000"):
        load_yaml("a: " + "x" * 60_000_000)                      # the 60 MB upload: refused by its size
    assert time.process_time() - started < 5                     # each refusal costs a fraction of a second


def test_empty_and_scalar_documents():
    assert load_yaml("") is None and load_yaml("# only a comment\n---\n") is None
    assert load_yaml("just text") == "just text"
    assert load_yaml(b"\xef\xbb\xbfa: 1") == {"a": 1}
    with pytest.raises(FrameworkConfigError, match="a YAML mapping"):
        import_accelerate("- a\n- b\n")


def test_without_pyyaml_the_message_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "yaml", None)               # `import yaml` raises ImportError
    document._loader_class.cache_clear()
    try:
        with pytest.raises(FrameworkConfigError) as err:
            load_yaml("distributed_type: NO\n")
        assert 'pip install "zerocalc[configs]"' in err.value.allowed
    finally:
        monkeypatch.undo()
        document._loader_class.cache_clear()


# --- the same values as PyYAML's safe_load on everything we accept; refusals only for the reasons we list ----------
FRAGMENTS = ["a", "key", "- ", "-", ": ", ":", " ", "  ", "\n", "\n  ", "\n- ", "'", '"', "''", "#", " #c", "[",
             "]", "{", "}", ",", "1", "0x1", "07", "1.5", ".inf", "~", "null", "yes", "No", "on", "\\n", "\\", "&a",
             "*a", "!t", "|", ">", "---", "...", "?", "%", "@", "\t", "é", "1_0", "-1", "+.5", "0b1", "x y", "<<", "=",
             "2024-01-01", "1:30"]
OUR_REFUSALS = ("anchors are not read", "aliases are not read", "tags are not read", "duplicate key",
                "dates are not read")


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


@settings(max_examples=1500, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.sampled_from(FRAGMENTS), min_size=1, max_size=12).map("".join))
@example(text="--- \t")
@example(text="=: ")                          # "=" is the value tag: safe_load reads the key "="
@example(text="a: &a 1\nb: *a")
def test_documents_read_as_safe_load_reads_them_or_are_refused_for_a_listed_reason(text):
    try:
        reference = yaml.safe_load(text)
    except yaml.YAMLError:
        with pytest.raises(YamlError):                           # nothing PyYAML refuses is read
            load_yaml(text)
        return
    except (TypeError, ValueError, RecursionError):              # safe_load's constructors can fail on odd keys
        return
    try:
        ours = load_yaml(text)
    except YamlError as exc:
        assert any(reason in exc.value for reason in OUR_REFUSALS), (text, exc.value)
        return
    assert same(ours, reference), text


# --- writers --------------------------------------------------------------------------------------------------------
scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**20, 10**20),
                    st.floats(allow_nan=False, allow_infinity=True), st.text(max_size=12),
                    st.sampled_from(["no", "yes", "1", "1e3", "on", "~", "2024-01-01", "a: b", "#x", "- x", "'q'",
                                     "1:30", "&a", "*a", "!x"]))
keys = st.one_of(st.from_regex(r"[a-z_][a-z0-9_]{0,10}", fullmatch=True), st.sampled_from(["no", "1", "a b"]))
trees = st.recursive(st.dictionaries(keys, scalars, max_size=4),
                     lambda inner: st.dictionaries(keys, st.one_of(scalars, inner, st.lists(scalars, max_size=3)),
                                                   max_size=4), max_leaves=12)


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(trees)
def test_dump_yaml_reads_back_identically_by_safe_load_and_by_us(tree):
    text = dump_yaml(tree, ["a comment"])
    assert text.startswith("# a comment\n")
    assert same(yaml.safe_load(text) or {}, tree)
    assert same(load_yaml(text) or {}, tree)


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
