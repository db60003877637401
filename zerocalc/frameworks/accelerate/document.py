"""accelerate's YAML, read and written with PyYAML, the library accelerate itself uses (commands/config/
config_args.py loads a config with yaml.safe_load; `accelerate config` writes it with yaml.safe_dump), so every
value reads as accelerate reads it, by construction.

The loader is yaml.SafeLoader with refusals of its own, each with the line and column PyYAML reports:
- anchors and aliases (an alias can multiply a small file into a huge one: alias bombs), any explicit tag, and
  more than one document (the loader's own single-document check);
- nesting deeper than MAX_DEPTH, more than MAX_NODES nodes, more than MAX_YAML_CHARS characters (accelerate's own
  files are a few hundred bytes; PyYAML's pure-Python scanner takes about 2 s per MB on these machines);
- a key given twice (safe_load keeps the last silently; DeepSpeed refuses duplicates in its JSON) and dates (no
  accelerate setting is a date: quote one to keep it as text).

PyYAML is imported inside these functions only, so `import zerocalc` stays standard library only; without it the
error says `pip install "zerocalc[configs]"`.
"""

from __future__ import annotations

from functools import lru_cache

from ...values import Given
from ..common import FrameworkConfigError, decode_text, line_col, long_integer_refusal, parse_json, require_mapping_keys

MAX_YAML_CHARS = 262_144
MAX_DEPTH = 32
MAX_NODES = 10_000
INSTALL_HINT = 'pip install "zerocalc[configs]" (PyYAML; or pip install -r requirements.txt)'
ALLOWED = ("YAML as yaml.safe_load reads it (accelerate, TRL and verl's Hydra read theirs with PyYAML), without "
           f"anchors, aliases, tags, duplicate keys, dates or a second document; at most {MAX_DEPTH} levels deep and "
           f"{MAX_NODES:,} values")


class YamlError(FrameworkConfigError):
    def __init__(self, line: int, column: int, message: str):
        # a Given: the message says where and what, not "the text '...'" as if the file had held these words
        super().__init__("config", Given(f"line {line}, column {column}: {message}"), ALLOWED, line, column)


def _pyyaml(field: str = "config", doing: str = "reading"):
    try:
        import yaml
    except ImportError:
        raise FrameworkConfigError(field, "accelerate YAML", f"PyYAML installed: {doing} accelerate's YAML needs "
                                   f"the library accelerate uses ({INSTALL_HINT})") from None
    return yaml


def _at(mark, message: str) -> YamlError:
    return YamlError(mark.line + 1, mark.column + 1, message)


@lru_cache(maxsize=1)
def _loader_class():
    yaml = _pyyaml()

    class Loader(yaml.SafeLoader):
        """yaml.SafeLoader that refuses, while composing, what could make a small file costly or ambiguous."""

        def __init__(self, stream):
            super().__init__(stream)
            self.depth, self.nodes = 0, 0

        def compose_node(self, parent, index):
            event = self.peek_event()
            if isinstance(event, yaml.AliasEvent):
                raise _at(event.start_mark, f"aliases are not read (*{event.anchor[:40]})")
            if getattr(event, "anchor", None) is not None:
                raise _at(event.start_mark, f"anchors are not read (&{event.anchor[:40]})")
            if getattr(event, "tag", None) is not None:
                tag = str(event.tag).replace("tag:yaml.org,2002:", "!!")
                raise _at(event.start_mark, f"tags are not read ({tag[:40]})")
            self.nodes += 1
            if self.nodes > MAX_NODES:
                raise _at(event.start_mark, f"more than {MAX_NODES:,} values")
            if not isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
                return super().compose_node(parent, index)
            self.depth += 1
            if self.depth > MAX_DEPTH:
                raise _at(event.start_mark, f"nesting deeper than {MAX_DEPTH} levels")
            try:
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

        def construct_mapping(self, node, deep=False):
            seen = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue                       # a merge key (<<) may be given once per mapping anyway
                # "=" resolves to the value tag, which SafeConstructor.flatten_mapping reads as the string "="
                key = key_node.value if key_node.tag == "tag:yaml.org,2002:value" else \
                    self.construct_object(key_node, deep=deep)
                try:
                    duplicate = key in seen
                except TypeError:                  # a list or mapping as a key: SafeLoader refuses it below
                    continue
                if duplicate:
                    raise _at(key_node.start_mark, f"duplicate key {str(key)[:40]!r}: give each key once")
                seen.add(key)
            return super().construct_mapping(node, deep=deep)

    def refuse_date(loader, node):
        raise _at(node.start_mark, f"dates are not read ({node.value[:40]}): no accelerate setting is one; quote it "
                                   "to keep it as text")

    Loader.add_constructor("tag:yaml.org,2002:timestamp", refuse_date)
    return Loader


def load_yaml(source):
    """The document as dicts, lists and scalars (None for an empty one), as yaml.safe_load reads it; YamlError
    (a FrameworkConfigError on "config" with the line and column) for what it refuses or PyYAML cannot read."""
    text = decode_text(source, "YAML")
    if len(text) > MAX_YAML_CHARS:
        raise FrameworkConfigError("config", f"{len(text):,} characters", f"a YAML config of at most "
                                   f"{MAX_YAML_CHARS:,} characters (the frameworks write a few thousand)")
    yaml, loader_class, loader = _pyyaml(), _loader_class(), None
    try:
        loader = loader_class(text)          # PyYAML's Reader checks every character here
        return loader.get_single_data()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        what = ", ".join(str(p) for p in (exc.problem, exc.context) if p)[:160] or type(exc).__name__
        if "expected a single document" in str(exc.context):
            what = "a second document: a config is one YAML document"
        raise (_at(mark, what) if mark is not None else YamlError(1, 1, what)) from None
    except yaml.reader.ReaderError as exc:
        line, col = line_col(text, exc.position)
        raise YamlError(line, col, f"a character YAML does not allow (#x{exc.character:04x})") from None
    except yaml.YAMLError as exc:
        raise YamlError(1, 1, type(exc).__name__) from None
    except RecursionError:
        raise YamlError(1, 1, "nesting too deep") from None
    except FrameworkConfigError:           # our own refusals while composing (a ValueError too): as they are
        raise
    except ValueError:                     # int() of a number over Python's digit limit
        raise (long_integer_refusal(text, "YAML") or YamlError(1, 1, "a value PyYAML cannot "
                                                                                        "read")) from None
    finally:
        if loader is not None:
            loader.dispose()


def dump_yaml(data: dict, comments=()) -> str:
    """The mapping as `accelerate config` writes it (yaml.safe_dump, keys in the given order), under # comments."""
    yaml = _pyyaml("export", "writing")
    head = "".join(f"# {c}\n" for c in comments)
    return head + yaml.safe_dump(data, sort_keys=False, default_flow_style=False, allow_unicode=False)


def load_mapping(source, label: str, allowed: str) -> dict:
    """A config file of YAML (or JSON, when it starts with "{") that must be a mapping with text keys: accelerate's,
    LLaMA-Factory's and the Trainer's files. `label` names the format in a decoding refusal, `allowed` the mapping."""
    text = decode_text(source, label)
    data = parse_json(text) if text.lstrip().startswith("{") else load_yaml(text)
    if not isinstance(data, dict):
        raise FrameworkConfigError("config", type(data).__name__, allowed)
    require_mapping_keys(data, "")
    return data
