"""The source line of a frame, read through the job's own root (/proc/<pid>/root), so a job in
a container shows its code as it sees it. Cached per file; big or unreadable files are skipped.
A file is kept as its bytes and where its lines start (two blocks), never as a str per line: a
job's stacks run through dozens of torch and stdlib files (16-70 thousand lines), and a node
watcher that kept them as lines made and freed that many small objects for every job that came
and went, which left Python's allocator holding arenas it could not give back (the exporter's RSS
crept up under churn). What a job keeps is bounded (``KEPT_BYTES_MAX``) and goes with it.

It also finds, in the user's own files, the call that sets the loader's worker count: often not
``DataLoader(`` itself but a library's builder (timm's ``create_loader``, transformers'
``TrainingArguments``), or another pipeline's (torchdata.nodes' ``ParallelMapper``, an SPDL stage's
``.pipe``, a ``ThreadPoolExecutor``), and the command-line flag the count comes from, since that
call or flag is what the user can change."""

from __future__ import annotations

import re
from array import array
from dataclasses import dataclass
from typing import Optional

MAX_SOURCE_BYTES = 2 << 20
KEPT_BYTES_MAX = 8 << 20  # files kept per job, all together; past this the oldest are dropped (read again if asked)
_LINE_END = re.compile(rb"\r\n?|\n")
MAX_ARGUMENT_LINES = 40  # a call's arguments are read to its closing parenthesis, at most this many lines on
MAX_HOPS = 3  # how many assignments/constructor keywords a value is followed through to its flag


@dataclass(frozen=True)
class Builder:
    """A call in user code that sets a loader's worker count, and the keyword that does."""

    name: str  # regex of the called name
    keyword: str
    library: str
    direct: bool = False  # builds the DataLoader itself: preferred over the builders one step removed
    flag: Optional[str] = None  # the command-line flag the keyword is, for argument parsers
    needs: Optional[str] = None  # regex the call's arguments must match
    method: bool = False  # called as a method (``.pipe(``), never as a function of that name
    imports: Optional[str] = None  # regex a line of its file must match (the library's import)
    fallback: bool = False  # a general-purpose call: one only where no loader's builder is there


_TRAINING_ARGUMENTS = r"(?:Seq2Seq)?TrainingArguments|(?:SFT|DPO|GRPO|ORPO|KTO|Reward)Config"
BUILDERS = (
    Builder(r"(?:Stateful)?DataLoader", "num_workers", "torch", direct=True),
    Builder(r"create_loader", "num_workers", "timm"),
    Builder(_TRAINING_ARGUMENTS, "dataloader_num_workers", "transformers"),
    # the TrainingArguments parsed from the command line: `--dataloader_num_workers 4`
    Builder(
        r"HfArgumentParser|TrlParser",
        "dataloader_num_workers",
        "transformers",
        flag="--dataloader_num_workers",
        needs=rf"\b(?:{_TRAINING_ARGUMENTS})\b",
    ),
    Builder(r"ParallelMapper", "num_workers", "torchdata", direct=True),
    Builder(r"pipe", "concurrency", "spdl", direct=True, method=True, imports=r"\bspdl\b"),
    # a pool of the user's own that fills its input: any other pool of the script is as likely
    Builder(r"ThreadPoolExecutor", "max_workers", "concurrent.futures", fallback=True),
)
_CALL = re.compile(r"\b(?P<name>" + "|".join(b.name for b in BUILDERS) + r")\s*\(")
_NOT_CALLS = ("#", "from ", "import ", "def ", "class ", "async def ")
_ADD_ARGUMENT = re.compile(r"\b(?P<name>add_argument)\s*\(")
_OPTION = re.compile(r"""\s*[rbuRBU]?(['"])(-[^'"]*)\1\s*,?""")
_DEST = re.compile(r"""\bdest\s*=\s*['"](\w+)['"]""")
_LIGHTNING_CLI = re.compile(r"\bLightningCLI\s*\(")


@dataclass(frozen=True)
class LoaderSite:
    """Where the user's code sets a loader's worker count, so advice can name what to change."""

    where: Optional[str]  # "file:line" of the call; None when several calls fit but all take the same flag
    call: str  # the name called: "DataLoader", "create_loader", "TrainingArguments", ...
    keyword: str  # the keyword that sets the worker count there: "num_workers", "dataloader_num_workers"
    library: str  # who builds the DataLoader: "torch", "timm", "transformers"
    flag: Optional[str] = None  # the command-line flag the count comes from: "--workers"


@dataclass(frozen=True)
class _Call:
    path: str
    index: int  # 0-based line of the call
    name: str  # as called
    arguments: str  # the text between its parentheses, comments dropped
    method: bool = False  # called on an object (``x.name(``)


class SourceLines:
    def __init__(self) -> None:
        self._files: dict[str, Optional[_Text]] = {}  # path -> its text, or None (unreadable, too big)
        self._kept_bytes = 0
        self._decoded: dict[str, list[str]] = {}  # lines of the files one loader_call reads (dropped after it)
        self._sites: dict[tuple, Optional[LoaderSite]] = {}  # the files are read once, so are the answers

    def line(self, pid: int, path: str, number: Optional[int]) -> Optional[str]:
        if not number or not path.startswith("/"):
            return None
        text = self._text(pid, path)
        return text.line(number) if text is not None else None

    def _text(self, pid: int, path: str) -> Optional[_Text]:
        if path not in self._files:
            text = self._files[path] = _read_text(f"/proc/{pid}/root{path}")
            self._kept_bytes += text.size if text is not None else 0
            while self._kept_bytes > KEPT_BYTES_MAX and len(self._files) > 1:
                oldest = next(iter(self._files))
                dropped = self._files.pop(oldest)
                self._kept_bytes -= dropped.size if dropped is not None else 0
        return self._files.get(path)

    def forget(self, pid: int) -> None:
        """A trainer that is gone: its loader sites go with it."""
        for key in [k for k in self._sites if k[0] == pid]:
            del self._sites[key]

    def loader_call(self, pid: int, paths: list[str], dataset: Optional[str]) -> Optional[LoaderSite]:
        """The call in these files that sets the worker count of the loader over ``dataset``: the one
        naming it (its class, or a variable assigned it), else the only one; a direct ``DataLoader(``
        beats a builder when naming does not decide. None when unsure, but a site without ``where``
        when the candidates all take the count from one flag (timm's train and eval loaders)."""
        key = (pid, tuple(paths), dataset)
        if key not in self._sites:
            try:
                self._sites[key] = self._loader_call(pid, paths, dataset)
            finally:
                self._decoded.clear()
        return self._sites[key]

    def _loader_call(self, pid: int, paths: list[str], dataset: Optional[str]) -> Optional[LoaderSite]:
        for path in paths:
            text = self._text(pid, path) if path.startswith("/") else None
            self._decoded[path] = text.lines() if text is not None else []
        found = self._builder_calls(paths)
        names = self._dataset_names(paths, dataset)
        named = [f for f in found if _names_any(f[0].arguments, names)]
        direct = [f for f in found if f[1].direct]
        one = _the_one(named, direct, found)
        if one is not None:
            return self._site(*one, paths, where=f"{one[0].path}:{one[0].index + 1}")
        return self._shared_flag(named or direct or found, paths)

    def _builder_calls(self, paths: list[str]) -> list[tuple[_Call, Builder]]:
        """Each call in these files to a builder of the loader, with the builder it calls (those
        that build it only with certain arguments, as a method or in a file of their library, when
        so; a general-purpose call only where no other builder is)."""
        found = []
        for call in self._calls(paths, _CALL):
            builder = next(b for b in BUILDERS if re.fullmatch(b.name, call.name))
            if builder.needs is not None and not re.search(builder.needs, call.arguments):
                continue
            if builder.method and not call.method:
                continue
            if builder.imports is None or any(re.search(builder.imports, t) for t in self._lines(call.path)):
                found.append((call, builder))
        return [f for f in found if not f[1].fallback] or found

    def _dataset_names(self, paths: list[str], dataset: Optional[str]) -> list[str]:
        """The dataset's class and the variables it was assigned to (``train_set = ImageFolder(...)``):
        a call naming one of them builds this loader."""
        if not dataset:
            return []
        assigned = re.compile(rf"(\w+)\s*=\s*(?:[\w.]+\.)?{re.escape(dataset)}\s*\(")
        return [dataset] + [m.group(1) for path in paths for text in self._lines(path) for m in assigned.finditer(text)]

    def _shared_flag(self, candidates: list[tuple[_Call, Builder]], paths: list[str]) -> Optional[LoaderSite]:
        """Several calls fit: a site without ``where`` when they all take the count from one flag."""
        sites = {self._site(*f, paths, where=None) for f in candidates}
        site = sites.pop() if len(sites) == 1 else None
        return site if site is not None and site.flag else None

    def _site(self, call: _Call, builder: Builder, paths: list[str], where: Optional[str]) -> LoaderSite:
        flag = builder.flag
        value = _keyword_value(call.arguments, builder.keyword)
        if flag is None and value is not None:
            flag = self._flag(value, call.path, call.index, paths, MAX_HOPS)
        return LoaderSite(where, call.name, builder.keyword, builder.library, flag)

    def _flag(self, value: str, path: str, index: int, paths: list[str], hops: int) -> Optional[str]:
        """The flag a value comes from: ``args.workers`` is the parsed ``--workers``; a local name,
        ``self.x`` or ``self.hparams.x`` is followed to what it was assigned or constructed with."""
        parts = value.split(".")
        if hops <= 0:
            return None
        if len(parts) == 1:  # a local: its assignments above, in the same function
            values = _assignments(self._lines(path), index, parts[0])
            return _agreed([self._flag(v, path, i, paths, hops - 1) if v else None for i, v in values])
        if parts[0] != "self" or (len(parts) > 2 and parts[1] != "hparams"):
            return self._argparse_flag(parts[-1], paths)  # an attribute of a parsed namespace
        return self._attribute_flag(parts[-1], path, index, paths, hops)

    def _attribute_flag(self, name: str, path: str, index: int, paths: list[str], hops: int) -> Optional[str]:
        """``self.<name>``: the keyword the class was built with (``MyDataModule(num_workers=args.j)``),
        else what it was assigned (``self.workers = cfg.workers``), else LightningCLI's option."""
        owner = _enclosing_class(self._lines(path), index)
        if owner is None:
            return None
        built = self._calls(paths, re.compile(rf"\b(?P<name>{owner[0]})\s*\("))
        values = [
            (c.path, c.index, _keyword_value(c.arguments, name)) for c in built if _has_keyword(c.arguments, name)
        ]
        if not values:
            lines = self._lines(path)
            values = [(path, i, v) for i, v in _assignments(lines, len(lines), f"self.{name}") if v != name]
        if values:
            return _agreed([self._flag(v, p, i, paths, hops - 1) if v else None for p, i, v in values])
        if any(_LIGHTNING_CLI.search(text) for p in paths for text in self._lines(p)):
            section = "data" if "DataModule" in owner[1] else "model" if "LightningModule" in owner[1] else None
            return f"--{section}.{name}" if section else None
        return None

    def _argparse_flag(self, dest: str, paths: list[str]) -> Optional[str]:
        """The option of the ``add_argument(...)`` that stores into ``dest``, by argparse's rules:
        ``dest=`` if given, else the first long option with ``-`` as ``_``, else the first short one."""
        flags = set()
        for call in self._calls(paths, _ADD_ARGUMENT):
            options, at = [], 0
            while match := _OPTION.match(call.arguments, at):
                options.append(match.group(2))
                at = match.end()
            longs = [o for o in options if o.startswith("--")]
            named = _DEST.search(call.arguments)
            stores = named.group(1) if named else (longs or options or ["-"])[0].lstrip("-").replace("-", "_")
            if options and stores == dest:
                flags.add((longs or options)[0])
        return flags.pop() if len(flags) == 1 else None

    def _calls(self, paths: list[str], pattern: re.Pattern) -> list[_Call]:
        """The calls matching ``pattern`` (its group ``name``; one a line) in these files, with their arguments."""
        calls = []
        for path in paths:
            lines = self._lines(path)
            for index, text in enumerate(lines):
                match = pattern.search(text)
                if match is None or text.lstrip().startswith(_NOT_CALLS) or "#" in text[: match.start()]:
                    continue
                arguments = _arguments(lines, index, match.end() - 1)
                calls.append(_Call(path, index, match.group("name"), arguments, text[: match.start()].endswith(".")))
        return calls

    def _lines(self, path: str) -> list[str]:
        return self._decoded.get(path) or []


def _arguments(lines: list[str], index: int, column: int) -> str:
    """The text between the ``(`` at lines[index][column] and its match (or MAX_ARGUMENT_LINES),
    comments dropped; quotes are skipped one line at a time, as call arguments are written."""
    depth = 0
    kept: list[str] = []
    for text in lines[index : index + MAX_ARGUMENT_LINES]:
        quote, escaped = "", False
        line: list[str] = []
        for char in text[column:]:
            if quote:
                escaped, quote = (not escaped and char == "\\"), ("" if char == quote and not escaped else quote)
            elif char == "#":
                break
            elif char in "'\"":
                quote = char
            elif char in "([{":
                depth += 1
            elif char in ")]}":
                depth -= 1
                if depth == 0:
                    return "\n".join([*kept, "".join(line)])[1:]
            line.append(char)
        kept.append("".join(line))
        column = 0
    return "\n".join(kept)[1:]


def _the_one(
    named: list[tuple[_Call, Builder]], direct: list[tuple[_Call, Builder]], found: list[tuple[_Call, Builder]]
) -> Optional[tuple[_Call, Builder]]:
    """The call that surely builds the loader: the only one naming its dataset, else the only
    direct one of those; where none names it, the only ``DataLoader(``, else the only call."""
    for pool in (named, [f for f in named if f[1].direct], [] if named else direct or found):
        if len(pool) == 1:
            return pool[0]
    return None


def _names_any(arguments: str, names: list[str]) -> bool:
    """Whether a call's arguments name one of these (a class or a variable), as a whole word."""
    return any(re.search(rf"\b{re.escape(name)}\b", arguments) for name in names)


def _keyword_value(arguments: str, keyword: str) -> Optional[str]:
    """The dotted name a keyword is given (``args.workers``, ``workers``); None for a literal or an
    expression, or when the keyword is not there."""
    match = re.search(rf"(?<![\w.]){re.escape(keyword)}\s*=\s*([A-Za-z_][\w.]*)\s*(?:,|\Z)", arguments)
    return match.group(1) if match else None


def _has_keyword(arguments: str, keyword: str) -> bool:
    return re.search(rf"(?<![\w.]){re.escape(keyword)}\s*=(?!=)", arguments) is not None


def _assignments(lines: list[str], index: int, target: str) -> list[tuple[int, Optional[str]]]:
    """Where ``target`` is assigned above lines[index] in the same function (the whole file for
    ``self.x``), and the dotted name assigned, None for anything else."""
    assign = re.compile(rf"^(\s*){re.escape(target)}\s*=(?!=)\s*(.*?)\s*(?:#.*)?$")
    indent = len(lines[index]) - len(lines[index].lstrip()) if index < len(lines) else None
    found = []
    for i in range(index - 1, -1, -1):
        text = lines[i]
        if indent is not None and re.match(r"\s*(?:async\s+)?def\s", text):
            if len(text) - len(text.lstrip()) < indent:
                break
        match = assign.match(text)
        if match:
            found.append((i, match.group(2) if re.fullmatch(r"[A-Za-z_][\w.]*", match.group(2)) else None))
    return found


def _enclosing_class(lines: list[str], index: int) -> Optional[tuple[str, str]]:
    """The name and header of the class whose body holds lines[index]."""
    indent = len(lines[index]) - len(lines[index].lstrip())
    for text in reversed(lines[:index]):
        match = re.match(r"(\s*)class\s+(\w+)(.*)", text)
        if match and len(match.group(1)) < indent:
            return match.group(2), match.group(3)
    return None


def _agreed(flags: list[Optional[str]]) -> Optional[str]:
    """The one flag all these resolved to; None if any did not or they differ."""
    return flags[0] if flags and None not in flags and len(set(flags)) == 1 else None


class _Text:
    """A source file as its bytes and the offsets its lines start at: two blocks however many lines."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.starts = array("I", [0])
        self.starts.extend(m.end() for m in _LINE_END.finditer(data))
        if self.starts[-1] == len(data) and len(self.starts) > 1:
            self.starts.pop()  # a last line end is no line of its own
        elif not data:
            self.starts.pop()

    @property
    def size(self) -> int:
        return len(self.data) + self.starts.itemsize * len(self.starts)

    def line(self, number: int) -> Optional[str]:
        """Line ``number`` (1-based), stripped; None past the end or blank."""
        if number < 1 or number > len(self.starts):
            return None
        end = self.starts[number] if number < len(self.starts) else len(self.data)
        return self.data[self.starts[number - 1] : end].decode(errors="replace").strip() or None

    def lines(self) -> list[str]:
        return self.data.decode(errors="replace").splitlines()


def _read_text(path: str) -> Optional[_Text]:
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_SOURCE_BYTES + 1)
    except OSError:
        return None
    return None if len(data) > MAX_SOURCE_BYTES else _Text(data)
