"""Which files a shell command reads and writes, read from the command string alone.

    effects("cd /testbed && sed -n '120,160p' django/x.py")
    # [Effect("read", "/testbed/django/x.py", lines="120-160")]
    effects("sed -i 's/a/b/' src/x.py && cat src/x.py", cwd="/repo")
    # [Effect("write", "/repo/src/x.py"), Effect("read", "/repo/src/x.py")]

Coding agents that have a single `bash` tool read and edit files inside its `command` string; this
module names those files so that an earlier reading of a file can be known stale after a later
write. A READ is claimed only when the command's own output shows the file's content (the reading
command ends its pipeline, or feeds only line filters: `head`, `tail`, `cat`, `nl`, `sed -n`,
`grep`, `tee`); a WRITE when a recognised command changes the file (redirections, `sed -i`, `tee`,
`cp`, `mv`, `rm`, inline patches, a Python script's literal `open(..., "w")`). The overriding rule:
anything not recognised claims nothing — an option we do not know, a glob, a `$variable`, a
directory walk, a branch that may not have run (after `||`, in an `if` or loop body). No input
raises: what cannot be parsed claims nothing.

Parsing: the statement structure comes from bashlex (a port of bash's own parser: lists,
pipelines, subshells, groups, loops, redirections), wrapped so that none of its exceptions escape.
bashlex rejects the most common agent form, a quoted heredoc delimiter (`<<'EOF'`), and some
bash-isms (`$((...))`, `[[ ... ]]`, `case`); so a small quote-aware lexer of our own runs first: it
finds heredoc bodies (and rewrites their delimiters unquoted, in place, for bashlex), and when
bashlex still fails its tokens, unquoted by `shlex`, are read as flat and-or lists of pipelines,
claiming nothing from the first compound construct on (also used for the one input found to make
bashlex loop forever: `${` without its `}`). A command our lexer cannot read (an unterminated
quote: bash itself refuses it) claims nothing.
"""

from __future__ import annotations

import ast
import functools
import posixpath
import re
import shlex
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

import bashlex


@dataclass(frozen=True)
class Effect:
    """One file a command reads (its output shows the content) or writes (changes)."""

    access: str  # "read" or "write"
    path: str  # posixpath.normpath'd, joined to the current directory when one is known
    lines: str | None = None  # "120-160", "5", "120-", "1-20,40-50"; None: whole file, or see part
    part: str | None = None  # a part whose line numbers the command does not tell, in words


def effects(command: str, *, cwd: str | None = None, returncode: int | None = None,
            scripts: dict[str, str] | None = None) -> list[Effect]:
    """The files `command` reads and writes, in command order, each (access, path) at most once
    per distinct part. A non-zero `returncode` drops the writes: we cannot tell whether they ran.
    `scripts`: the files earlier commands wrote with a heredoc (path -> text), so that `python F`
    writes what F opens for writing; the scripts this command writes are added to it."""
    if not isinstance(command, str) or (cwd is not None and not isinstance(cwd, str)):
        return []
    found, written = _effects(command, cwd, tuple(sorted((scripts or {}).items())) if scripts and "python" in command else ())
    if scripts is not None and not returncode:
        scripts.update(written)
    if returncode:
        return [e for e in found if e.access != "write"]
    return list(found)


@functools.lru_cache(maxsize=4096)
def _effects(command: str, cwd: str | None, known: tuple[tuple[str, str], ...] = ()
             ) -> tuple[tuple[Effect, ...], tuple[tuple[str, str], ...]]:
    try:
        return _read_command(command, cwd, dict(known))
    except Exception:  # never raise: what we cannot read claims nothing
        return (), ()


def _read_command(command: str, cwd: str | None, known: dict[str, str]
                  ) -> tuple[tuple[Effect, ...], tuple[tuple[str, str], ...]]:
    """(the effects, the scripts this command wrote with a heredoc that `known` did not hold)."""
    state = _State(cwd=posixpath.normpath(cwd) if cwd else None, scripts=dict(known))
    out: list[Effect] = []
    tokens = _lex(command)
    state.words = {t.span: t.value for t in tokens if t.span and t.text not in ("<<", "<<-")}
    try:
        if any(_unclosed_brace(t.text) for t in tokens if t.span):
            raise _Unparsed("bashlex 0.18 loops forever on a word with `${` and no `}`")
        trees = bashlex.parse(_unquote_delimiters(command, tokens))
    except Exception:  # bashlex raises its own errors, NotImplementedError, and worse
        _walk_tokens(tokens, state, out)
    else:
        for tree in trees:
            _walk(tree, state, out, maybe=False, shown=True)
    written = tuple((k, v) for k, v in state.scripts.items() if known.get(k) != v)
    return tuple(dict.fromkeys(out)), written  # each claim once, in command order


# --- the state a command runs in ------------------------------------------------------------

_LOST = "\0lost"  # the directory after a `cd` we cannot follow: relative paths claim nothing


@dataclass
class _State:
    cwd: str | None  # None: the caller's unknown directory (relative paths stay relative)
    dead: bool = False  # after `exit`: nothing later runs
    scripts: dict[str, str] = field(default_factory=dict)  # heredoc-written files, for `python F`
    # our lexer's value of the word at each (start, end): bashlex unquotes some words unlike bash
    # (it drops the backslash of "a\|b"), so a word it shares with ours takes our value
    words: dict[tuple[int, int], str | None] = field(default_factory=dict)

    def path(self, word: str | None) -> str | None:
        """The file a word names, or None when it names none we can tell."""
        if (not word or word == "-" or word.startswith("~") or word.endswith("/")
                or any(c in "*?[$`" or c < " " for c in word) or ("{" in word and "}" in word)):
            return None  # a glob, an expansion, stdin, a directory, control characters
        if not word.startswith("/"):
            if self.cwd == _LOST:
                return None
            if self.cwd is not None:
                word = posixpath.join(self.cwd, word)
        path = posixpath.normpath(word)
        if path in (".", "..", "/") or path.startswith(("/dev/", "/proc/")) or path.endswith("/.."):
            return None
        return path

    def copy(self) -> _State:
        return _State(self.cwd, self.dead, dict(self.scripts), self.words)


class _Redir(NamedTuple):
    fd: int | None  # the descriptor written before the operator (`2>`), None when absent
    op: str  # ">", ">>", ">|", "&>", "&>>", ">&", "<", "<<", "<<-", "<<<", ...
    target: str | None  # the literal word after it (None: it expands), or the fd of a dup
    body: str | None = None  # a heredoc's or here-string's text


class _Cmd(NamedTuple):
    words: tuple[str | None, ...]  # literal words; None for a word that expands
    redirs: tuple[_Redir, ...]


# A pipeline stage that is a compound command: walked with (state, out, shown).
_Compound = Callable[["_State", list[Effect], bool], None]


# --- our lexer: heredocs, and the fallback when bashlex fails -------------------------------


class _Unparsed(Exception):
    pass


class _Tok(NamedTuple):
    kind: str  # "word", "op" or "redir"
    text: str  # a word's raw text, an operator
    value: str | None = None  # a word's unquoted literal value (None: it expands)
    redir: _Redir | None = None
    span: tuple[int, int] | None = None  # a word's or heredoc delimiter's extent in the command


_OPS = ("&>>", "<<<", "<<-", "&&", "||", ";;", "|&", "&>", ">>", ">|", ">&", "<<", "<&", "<>",
        "|", "&", ";", "(", ")", "<", ">")
_REDIR_OPS = {"&>>", "<<<", "<<-", "&>", ">>", ">|", ">&", "<<", "<&", "<>", "<", ">"}
_META = set("|&;()<> \t\n")


def _lex(text: str) -> list[_Tok]:
    """Words, operators and redirections (heredoc bodies attached); raises _Unparsed."""
    toks: list[_Tok] = []
    pending: list[int] = []  # heredoc tokens waiting for their body after the next newline
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "\n":
            toks.append(_Tok("op", "\n"))
            i += 1
            for k in pending:
                i = _heredoc_body(text, i, toks, k)
            pending = []
        elif c in " \t" or text.startswith("\\\n", i):
            i += 1 if c in " \t" else 2
        elif c == "#":
            while i < n and text[i] != "\n":
                i += 1
        elif c in _META:
            op = next(o for o in _OPS if text.startswith(o, i))
            i += len(op)
            if op in _REDIR_OPS:
                i = _redirection(text, i, None, op, toks, pending)
            else:
                toks.append(_Tok("op", op))
        else:
            start = i
            i, value = _word(text, i)
            raw = text[start:i]
            if raw.isdigit() and i < n and text[i] in "<>":
                op = next(o for o in _OPS if text.startswith(o, i))
                i = _redirection(text, i + len(op), int(raw), op, toks, pending)
            else:
                toks.append(_Tok("word", raw, value, span=(start, i)))
    for k in pending:  # bash reads a heredoc left open to the end of the command
        _heredoc_body(text, n, toks, k)
    return toks


def _redirection(text: str, i: int, fd: int | None, op: str, toks: list[_Tok], pending: list[int]) -> int:
    while i < len(text) and text[i] in " \t":
        i += 1
    start = i
    i, value = _word(text, i)
    if i == start:
        raise _Unparsed("a redirection without its word")
    raw = text[start:i]
    if op in ("<<", "<<-"):
        delimiter = "".join(shlex.split(raw)) if any(q in raw for q in "'\"\\") else raw
        toks.append(_Tok("redir", op, delimiter, _Redir(fd, op, None), span=(start, i)))
        pending.append(len(toks) - 1)
    else:
        body = value + "\n" if op == "<<<" and value is not None else None
        toks.append(_Tok("redir", op, value, _Redir(fd, op, value, body), span=(start, i)))
    return i


def _heredoc_body(text: str, i: int, toks: list[_Tok], k: int) -> int:
    tok = toks[k]
    delimiter, strip_tabs = tok.value, tok.text == "<<-"
    lines: list[str] = []
    while i < len(text):
        end = text.find("\n", i)
        end = len(text) if end < 0 else end
        line = text[i:end]
        i = end + 1
        if (line.lstrip("\t") if strip_tabs else line) == delimiter:
            break
        lines.append(line.lstrip("\t") if strip_tabs else line)
    body = "\n".join(lines) + "\n" if lines else ""
    toks[k] = tok._replace(redir=tok.redir._replace(body=body))
    return min(i, len(text))


def _word(text: str, i: int) -> tuple[int, str | None]:
    """The end of the word at i, and its unquoted value (None when it expands)."""
    n, out, expands = len(text), [], False
    while i < n and text[i] not in _META:
        c = text[i]
        if c == "'":
            end = text.find("'", i + 1)
            if end < 0:
                raise _Unparsed("an unterminated single quote")
            out.append(text[i + 1:end])
            i = end + 1
        elif c == '"':
            i += 1
            while True:
                if i >= n:
                    raise _Unparsed("an unterminated double quote")
                c = text[i]
                if c == '"':
                    i += 1
                    break
                if c == "\\" and i + 1 < n:
                    out.append(text[i + 1] if text[i + 1] in '"\\$`' else text[i:i + 2])
                    i += 2
                elif c in "$`":
                    j = _expansion(text, i)
                    expands |= j > i + 1 or c == "`"
                    out.append(text[i:j])
                    i = j
                else:
                    out.append(c)
                    i += 1
        elif c == "\\":
            out.append(text[i + 1:i + 2])
            i += 2
        elif c in "$`":
            j = _expansion(text, i)
            expands |= j > i + 1 or c == "`"
            out.append(text[i:j])
            i = j
        else:
            out.append(c)
            i += 1
    return i, None if expands else "".join(out)


def _expansion(text: str, i: int) -> int:
    """The end of a `$...` or backtick expansion starting at i (i + 1 for a lone `$`)."""
    n = len(text)
    if text[i] == "`":
        j = i + 1
        while j < n and text[j] != "`":
            j += 2 if text[j] == "\\" else 1
        if j >= n:
            raise _Unparsed("an unterminated backtick")
        return j + 1
    nxt = text[i + 1:i + 2]
    if nxt in ("(", "{"):
        close, depth, j = ")" if nxt == "(" else "}", 1, i + 2
        while depth:
            if j >= n:
                raise _Unparsed("an unterminated expansion")
            c = text[j]
            if c in "'\"":
                end = text.find(c, j + 1)
                if end < 0:
                    raise _Unparsed("an unterminated quote in an expansion")
                j = end + 1
                continue
            if c == "\\":
                j += 2
                continue
            depth += (c == nxt) - (c == close)
            j += 1
        return j
    if nxt == "'":  # $'...' (ANSI-C quoting): treated as expanding
        end = text.find("'", i + 2)
        if end < 0:
            raise _Unparsed("an unterminated $'...'")
        return end + 1
    m = re.match(r"[A-Za-z_][A-Za-z0-9_]*|[0-9@*#?$!-]", text[i + 1:])
    return i + 1 + (m.end() if m else 0)


def _unclosed_brace(raw: str) -> bool:
    start = raw.rfind("${")
    return start >= 0 and "}" not in raw[start:]


def _unquote_delimiters(command: str, tokens: list[_Tok]) -> str:
    """The command with each quoted heredoc delimiter written unquoted, in place (bashlex does not
    strip the quotes and so never finds the end of `<<'EOF'`); same length, so positions hold."""
    chars = list(command)
    for tok in tokens:
        if tok.text in ("<<", "<<-") and tok.value != command[tok.span[0]:tok.span[1]]:
            start, end = tok.span
            chars[start:end] = list(tok.value.ljust(end - start))
    return "".join(chars)


_COMPOUND_WORDS = {"if", "then", "else", "elif", "fi", "for", "while", "until", "do", "done", "case",
                   "esac", "select", "function", "{", "}", "coproc"}


def _walk_tokens(tokens: list[_Tok], state: _State, out: list[Effect]) -> None:
    """The fallback reading: flat and-or lists of pipelines; nothing from a compound on."""
    stages: list[_Cmd] = []
    words: list[str | None] = []
    redirs: list[_Redir] = []
    maybe = False
    for tok in tokens:
        if tok.kind == "word":
            if not words and not redirs and tok.text in _COMPOUND_WORDS:
                return
            if not words and re.match(r"[A-Za-z_][A-Za-z0-9_]*=", tok.text):
                continue  # VAR=x before the name only sets its environment
            words.append(tok.value)
        elif tok.kind == "redir":
            redirs.append(tok.redir)
        elif tok.text in ("(", ")", ";;"):
            return
        else:
            stages.append(_Cmd(tuple(words), tuple(redirs)))
            words, redirs = [], []
            if tok.text in ("|", "|&"):
                continue
            _list_item(stages, state, out, maybe)
            stages = []
            maybe = tok.text == "||" or (maybe and tok.text == "&&")
    if words or redirs:
        stages.append(_Cmd(tuple(words), tuple(redirs)))
    if stages:
        _list_item(stages, state, out, maybe)


def _list_item(stages: list[_Cmd | _Compound], state: _State, out: list[Effect], maybe: bool) -> None:
    """One pipeline of an and-or list; a `maybe` one (it may not have run) claims nothing."""
    stages = [s for s in stages if not (isinstance(s, _Cmd) and not s.words and not s.redirs)]
    if not stages:
        return
    if maybe or state.dead:
        before, dead = state.cwd, state.dead
        _pipeline(stages, state, [], True)
        state.dead = dead  # an `exit` that may not have run
        if state.cwd != before:
            state.cwd = _LOST
        return
    _pipeline(stages, state, out, True)


# --- bashlex trees --------------------------------------------------------------------------


def _walk(node, state: _State, out: list[Effect], maybe: bool, shown: bool) -> None:
    kind = node.kind
    if kind == "list":
        current = maybe
        for part in node.parts:
            if part.kind == "operator":
                current = True if part.op == "||" else (current if part.op == "&&" else maybe)
            else:
                _walk(part, state, out, current, shown)
    elif kind in ("pipeline", "command", "compound"):
        stages = [_stage(p, state) for p in (node.parts if kind == "pipeline" else [node])
                  if p.kind not in ("pipe", "reservedword")]
        if not maybe and not state.dead:
            _pipeline(stages, state, out, shown)
        else:
            _list_item(stages, state, out, True)
    elif kind != "function":  # a function's definition runs nothing
        state.cwd = _LOST


def _stage(node, state: _State) -> _Cmd | _Compound:
    if node.kind == "command":
        words: list[str | None] = []
        redirs: list[_Redir] = []
        for part in node.parts:
            if part.kind == "word" or part.kind == "assignment" and words:
                words.append(state.words.get(part.pos, _value(part)))
            elif part.kind == "redirect":
                redirs.append(_redirect(part, state))
            elif part.kind != "assignment":  # VAR=x before the name only sets its environment
                words.append(None)
        return _Cmd(tuple(words), tuple(redirs))
    return functools.partial(_compound, node)


def _value(word) -> str | None:
    return None if getattr(word, "parts", None) else word.word


def _redirect(node, state: _State) -> _Redir:
    target = node.output
    if isinstance(target, int):
        value: str | None = str(target)
    elif target is not None and target.kind == "word":
        value = state.words.get(target.pos, _value(target))
    else:
        value = None
    body = None
    heredoc = getattr(node, "heredoc", None)
    if heredoc is not None:
        body = heredoc.value.rpartition("\n")[0] + "\n" if "\n" in heredoc.value else ""
        value = None
    elif node.type == "<<<" and value is not None:
        body = value + "\n"
    return _Redir(node.input if isinstance(node.input, int) else None, node.type, value, body)


def _compound(node, state: _State, out: list[Effect], shown: bool) -> None:
    """A subshell, group or loop; `shown` when its output reaches the command's output."""
    redirs = tuple(_redirect(r, state) for r in getattr(node, "redirects", None) or ())
    _redirect_writes(redirs, state, out)
    shown = shown and not _stdout_redirected(redirs)
    if node.kind == "compound":
        first = node.list[0]
        if first.kind == "reservedword" and first.word in ("(", "{"):
            inner = state.copy() if first.word == "(" else state
            for part in node.list[1:-1]:
                _walk(part, inner, out, False, shown)
            return
        for part in node.list:
            _compound(part, state, out, shown)
        return
    parts = [p for p in node.parts if not (p.kind == "reservedword" and p.word in (";", "\n"))]
    words = [p.word if p.kind == "reservedword" else None for p in parts]
    if node.kind == "for" and words[2:3] == ["in"] and "do" in words:
        listed = parts[3:words.index("do")]
        runs = any(p.kind == "word" and state.words.get(p.pos, _value(p)) is not None for p in listed)
        _loop_body(parts[words.index("do") + 1:-1], state, out, shown, maybe=not runs)
    elif node.kind in ("while", "until") and "do" in words:
        for part in parts[1:words.index("do")]:
            _walk(part, state, out, False, shown)
        _loop_body(parts[words.index("do") + 1:-1], state, out, shown, maybe=True)
    elif node.kind == "if" and "then" in words:
        for part in parts[1:words.index("then")]:
            _walk(part, state, out, False, shown)
        _loop_body(parts[words.index("then") + 1:-1], state, out, shown, maybe=True)
    else:
        state.cwd = _LOST


def _loop_body(parts, state: _State, out: list[Effect], shown: bool, maybe: bool) -> None:
    before = state.cwd
    for part in parts:
        if part.kind != "reservedword":
            _walk(part, state, out, maybe, shown)
    if state.cwd != before:  # a body may run many times, or not at all
        state.cwd = _LOST


# --- pipelines ------------------------------------------------------------------------------


class _View(NamedTuple):
    """What of a file reaches the output: line ranges (1-based, end None: to the end of the file),
    or a part in words; neither: the whole file."""

    ranges: tuple[tuple[int, int | None], ...] | None = None
    part: str | None = None


_WHOLE = _View()
_Filter = Callable[[_View], "_View | None"]


def _pipeline(stages: list[_Cmd | _Compound], state: _State, out: list[Effect], shown: bool) -> None:
    """The writes of every stage; the reads whose content flows, through recognised filters,
    to the output. A lone `cd` moves the state's directory (in a pipeline it runs in a subshell)."""
    pending: list[tuple[str, _View]] = []
    for index, stage in enumerate(stages):
        last = index == len(stages) - 1
        if not isinstance(stage, _Cmd):
            stage(state if len(stages) == 1 else state.copy(), out, shown and last)
            pending = []
            continue
        _redirect_writes(stage.redirs, state, out)
        if not stage.words:
            pending = []
            continue
        name = stage.words[0]
        if name == "cat" and len(stage.words) == 1:
            _remember_script(stage, state)
        if name in ("cd", "pushd", "popd") and len(stages) == 1:
            _cd(stage.words[1:] if name != "popd" else (None,), state)
            continue
        if name in ("exit", "return") and len(stages) == 1:
            state.dead = True
            continue
        stdin = _stdin_body(stage, stages[index - 1] if index else None)
        inputs = [r for r in stage.redirs if r.op in ("<", "<&", "<>", "<<", "<<-", "<<<") and r.fd in (None, 0)]
        if inputs:  # stdin comes from the redirection, not the pipe: `head -5 < x.py` shows x.py
            path = state.path(inputs[-1].target) if inputs[-1].op == "<" else None
            pending = [(path, _WHOLE)] if path is not None else []
        reads, filt = _command(stage, state, out, stdin)
        if reads is not None:
            pending = reads
        elif filt is not None and len(pending) > 1 and getattr(filt, "positional", False):
            pending = []  # `head` of several files' concatenation: which lines of which file?
        elif filt is not None:
            pending = [(p, v) for p, v in ((p, filt(v)) for p, v in pending) if v is not None]
        else:
            pending = []
        if _stdout_redirected(stage.redirs):
            pending = []
    if shown:
        for path, view in pending:
            out.append(_read(path, view))


def _remember_script(stage: _Cmd, state: _State) -> None:
    """The text `cat > F <<EOF` writes to F, for a `python F` later in the same command."""
    body = _stdin_body(stage, None)
    targets = [r.target for r in stage.redirs if r.op in (">", ">|") and r.fd in (None, 1)]
    path = state.path(targets[-1]) if targets else None
    if body is not None and path is not None:
        state.scripts[path] = body


def _read(path: str, view: _View) -> Effect:
    if view.part is not None:
        return Effect("read", path, part=view.part)
    return Effect("read", path, lines=_format(view.ranges) if view.ranges is not None else None)


def _format(ranges: tuple[tuple[int, int | None], ...]) -> str:
    return ",".join(str(a) if a == b else f"{a}-" if b is None else f"{a}-{b}" for a, b in ranges)


def _redirect_writes(redirs: tuple[_Redir, ...], state: _State, out: list[Effect]) -> None:
    for r in redirs:
        if r.op in (">", ">>", ">|", "&>", "&>>") or (r.op == ">&" and r.target is not None
                                                       and not r.target.isdigit() and r.target != "-"):
            path = state.path(r.target)
            if path is not None:
                out.append(Effect("write", path))


def _stdout_redirected(redirs: tuple[_Redir, ...]) -> bool:
    return any(r.op in (">", ">>", ">|", "&>", "&>>", ">&") and r.fd in (None, 1) for r in redirs)


def _stdin_body(stage: _Cmd, previous: _Cmd | _Compound | None) -> str | None:
    """The text a stage reads on its stdin when the command itself holds it: its own heredoc or
    here-string, or that of a bare `cat` piped into it."""
    for r in reversed(stage.redirs):
        if r.op in ("<<", "<<-", "<<<"):
            return r.body
        if r.op in ("<", "<&", "<>"):
            return None
    if isinstance(previous, _Cmd) and previous.words == ("cat",):
        return _stdin_body(previous, None)
    return None


def _cd(args: tuple[str | None, ...], state: _State) -> None:
    args = tuple(a for a in args if a not in ("-L", "-P", "--"))
    if len(args) != 1 or args[0] is None or args[0] == "-" or args[0].startswith("~"):
        state.cwd = _LOST
        return
    target = args[0]
    if target.startswith("/"):
        state.cwd = posixpath.normpath(target)
    elif state.cwd != _LOST:
        state.cwd = posixpath.normpath(posixpath.join(state.cwd or "", target))


# --- commands -------------------------------------------------------------------------------

# What a command does for the pipeline: the reads it starts (a list) or None, and else the filter
# it applies to what flows in (None: unrecognised, nothing flows on).
_Role = tuple[list[tuple[str, _View]] | None, _Filter | None]


def _command(cmd: _Cmd, state: _State, out: list[Effect], stdin: str | None) -> _Role:
    name = cmd.words[0]
    args = list(cmd.words[1:])
    if name is None:
        return None, None
    if re.fullmatch(r"python[0-9.]*", name):
        _python(args, state, out, stdin)
        return None, None
    handler = _COMMANDS.get(name)
    if handler is None:
        return None, None
    return handler(args, state, out, stdin)


def _getopt(args: list[str | None], short_flags: str, short_args: str, long_names: set[str]):
    """(options, operands) by getopt's rules, or None when an option is unknown or expands.
    Long options are kept with their `=value`; a short option's argument may be attached."""
    options: list[tuple[str, str | None]] = []
    operands: list[str | None] = []
    i = 0
    while i < len(args):
        a = args[i]
        i += 1
        if a is None or a == "-" or not a.startswith("-"):
            operands.append(a)
            continue
        if a == "--":
            operands.extend(args[i:])
            break
        if a.startswith("--"):
            name = a.split("=", 1)[0]
            if name not in long_names:
                return None
            options.append((name, a.split("=", 1)[1] if "=" in a else None))
            continue
        j = 1
        while j < len(a):
            c = a[j]
            if c in short_args:
                value = a[j + 1:] or (args[i] if i < len(args) else None)
                if not a[j + 1:]:
                    if i >= len(args):
                        return None
                    i += 1
                options.append(("-" + c, value))
                break
            if c not in short_flags:
                return None
            options.append(("-" + c, None))
            j += 1
    return options, operands


def _cat(args, state, out, stdin) -> _Role:
    parsed = _getopt(args, "AbeEnstTuv", "", {"--number", "--number-nonblank", "--show-all",
                                              "--squeeze-blank", "--show-ends", "--show-tabs"})
    if parsed is None:
        return None, None
    return _sources(parsed[1], state, _WHOLE)


def _nl(args, state, out, stdin) -> _Role:
    parsed = _getopt(args, "p", "bdfhilnsvw", set())
    if parsed is None:
        return None, None
    return _sources(parsed[1], state, _WHOLE)


def _sources(operands, state, view: _View | None) -> _Role:
    """Reads of each named file with `view`; with no file, a filter passing its input on."""
    if view is None:
        return None, None
    if not operands:
        return None, _identity
    return [(p, view) for p in map(state.path, operands) if p is not None], None


def _identity(view: _View) -> _View:
    return view


def _count(value: str | None) -> int | None:
    return int(value) if value is not None and value.isdigit() else None


def _head(args, state, out, stdin) -> _Role:
    args = ["-n" + a[1:] if a and re.fullmatch(r"-[0-9]+", a) else a for a in args]
    parsed = _getopt(args, "qv", "n", {"--lines", "--quiet", "--silent", "--verbose"})
    if parsed is None:
        return None, None
    options, operands = parsed
    value = next((v for o, v in reversed(options) if o in ("-n", "--lines")), "10")
    if value is not None and value.startswith("-") and _count(value[1:]) is not None:
        k = int(value[1:])
        return _sources(operands, state, _View(part=f"all but the last {k} lines")) if operands else (None, None)
    count = _count(value)
    if count is None:
        return None, None
    if operands:
        return _sources(operands, state, _View(((1, count),)) if count else None)
    return None, _positional(lambda view: _first(view, count))


def _tail(args, state, out, stdin) -> _Role:
    args = ["-n" + a[1:] if a and re.fullmatch(r"-[0-9]+", a) else a for a in args]
    parsed = _getopt(args, "qv", "n", {"--lines", "--quiet", "--silent", "--verbose"})
    if parsed is None:
        return None, None
    options, operands = parsed
    value = next((v for o, v in reversed(options) if o in ("-n", "--lines")), "10")
    if value is None:
        return None, None
    if value.startswith("+") and _count(value[1:]):
        start = int(value[1:])
        return _sources(operands, state, _View(((start, None),))) if operands else (
            None, _positional(lambda view: _from(view, start)))
    count = _count(value)
    if not count:
        return None, None
    if operands:
        return _sources(operands, state, _View(part=f"last {count} lines"))
    return None, _positional(lambda view: _last(view, count))


def _positional(filt: _Filter) -> _Filter:
    """A filter choosing lines by their place in its input (meaningless across several files)."""
    filt.positional = True  # type: ignore[attr-defined]
    return filt


def _describe(view: _View) -> str:
    if view.part is not None:
        return view.part
    return "the file" if view.ranges is None else f"lines {_format(view.ranges)}"


def _select(view: _View, wanted: list[tuple[int, int | None]]) -> _View | None:
    """The lines at positions `wanted` (1-based, merged, sorted) of what `view` shows."""
    if view.part is not None:
        return _View(part=f"lines {_format(tuple(wanted))} of {view.part}")
    if view.ranges is None:
        return _View(tuple(wanted))
    result: list[tuple[int, int | None]] = []
    offset = 0  # positions before the current range
    for a, b in view.ranges:
        size = None if b is None else b - a + 1
        for lo, hi in wanted:
            start = max(lo, offset + 1)
            end = hi if size is None else (offset + size if hi is None else min(hi, offset + size))
            if end is not None and end < start:
                continue
            result.append((a + start - offset - 1, None if end is None else a + end - offset - 1))
        if size is None:
            break
        offset += size
    return _View(tuple(result)) if result else None


def _first(view: _View, count: int) -> _View | None:
    if view.part is not None:
        return _View(part=f"first {count} of {view.part}")
    return _select(view, [(1, count)]) if count else None


def _last(view: _View, count: int) -> _View | None:
    if view.ranges is not None and all(b is not None for _, b in view.ranges):
        total = sum(b - a + 1 for a, b in view.ranges)
        return _select(view, [(max(1, total - count + 1), total)])
    if view == _WHOLE:
        return _View(part=f"last {count} lines")
    return _View(part=f"last {count} of {_describe(view)}")


def _from(view: _View, start: int) -> _View | None:
    if view.part is not None:
        return _View(part=f"{view.part} from the {start}th on")
    return _select(view, [(start, None)])


def _merge(ranges: list[tuple[int, int | None]]) -> list[tuple[int, int | None]]:
    merged: list[tuple[int, int | None]] = []
    for a, b in sorted(ranges, key=lambda r: r[0]):
        if merged and (merged[-1][1] is None or a <= merged[-1][1] + 1):
            last_a, last_b = merged[-1]
            merged[-1] = (last_a, None if last_b is None or b is None else max(last_b, b))
        else:
            merged.append((a, b))
    return merged


def _sed(args, state, out, stdin) -> _Role:
    """`sed -i` writes each file; `sed -n 'a,bp'` shows those lines (only printing commands)."""
    # BSD's `-i ''`: an empty suffix given as its own word (GNU sed would take it as the script)
    args = [a for k, a in enumerate(args) if not (a == "" and k and args[k - 1] == "-i")]
    # -i takes its suffix attached (`-i.bak`, `-ni.orig`), which getopt would read as more flags
    args = [_sed_in_place(a) for a in args]
    parsed = _getopt(args, "nErsuzi", "efl", {"--in-place", "--quiet", "--silent", "--expression",
                                                "--file", "--regexp-extended", "--separate",
                                                "--null-data", "--posix", "--debug"})
    if parsed is None:
        return None, None
    options, operands = parsed
    in_place = [o for o, _ in options if o in ("-i", "--in-place")]
    scripts = [v for o, v in options if o in ("-e", "--expression")]
    if not scripts and not any(o in ("-f", "--file") for o, _ in options):
        scripts, operands = operands[:1], operands[1:]
    if in_place:
        for path in map(state.path, operands):
            if path is not None:
                out.append(Effect("write", path))
        return None, None
    quiet = any(o in ("-n", "--quiet", "--silent") for o, _ in options)
    if not quiet or not scripts or any(s is None for s in scripts) or any(o in ("-f", "--file", "-s", "--separate", "-z", "--null-data") for o, _ in options):
        return None, None
    wanted = _sed_ranges("\n".join(scripts))
    if wanted is None:
        return None, None
    if len(operands) > 1:
        return None, None  # sed numbers the lines of its files' concatenation
    if not wanted:
        return None, None
    if operands:
        return _sources(operands, state, _View(tuple(wanted)))
    return None, _positional(lambda view: _select(view, wanted))


def _sed_in_place(arg: str | None) -> str | None:
    m = re.fullmatch(r"-([nErsuz]*)i.*", arg or "")
    return f"-{m.group(1)}i" if m else arg


def _sed_ranges(script: str) -> list[tuple[int, int | None]] | None:
    """The lines `sed -n SCRIPT` prints, when it holds only `Np`, `N,Mp`, `N,$p` and `Nq`."""
    ranges: list[tuple[int, int | None]] = []
    quit_at = None
    for command in re.split(r"[;\n]", script):
        command = command.strip()
        if not command:
            continue
        m = re.fullmatch(r"(\d+)\s*(?:,\s*(\d+|\$))?\s*p", command)
        q = re.fullmatch(r"(\d+)\s*q", command)
        if m:
            a = int(m.group(1))
            b = None if m.group(2) == "$" else int(m.group(2) or a)
            ranges.append((a, None if b is None else max(a, b)))
        elif q:
            quit_at = min(int(q.group(1)), quit_at or int(q.group(1)))
        else:
            return None
    if quit_at is not None:
        ranges = [(a, quit_at if b is None else min(b, quit_at)) for a, b in ranges if a <= quit_at]
    return [r for r in _merge(ranges) if r[0] >= 1]


def _awk(args, state, out, stdin) -> _Role:
    """`awk 'NR>=a && NR<=b'` and `awk 'NR==a,NR==b'` (printing whole lines) on one file."""
    if not args or args[0] is None or len(args) > 2:
        return None, None
    wanted = _awk_range(re.sub(r"\s+", "", args[0]))
    if wanted is None:
        return None, None
    if len(args) == 2:
        return _sources(args[1:], state, _View((wanted,)))
    return None, _positional(lambda view: _select(view, [wanted]))


def _awk_range(script: str) -> tuple[int, int | None] | None:
    m = re.fullmatch(r"(.*?)(\{print(?:\$0)?;?\})?", script)
    pattern = m.group(1)
    r = re.fullmatch(r"F?NR==(\d+),F?NR==(\d+)", pattern)
    if r:
        return int(r.group(1)), max(int(r.group(1)), int(r.group(2)))
    lo, hi = 1, None
    for condition in pattern.split("&&"):
        c = re.fullmatch(r"F?NR(>=|>|<=|<|==)(\d+)", condition)
        if not c:
            return None
        op, k = c.group(1), int(c.group(2))
        if op in (">=", ">", "=="):
            lo = max(lo, k + (op == ">"))
        if op in ("<=", "<", "=="):
            hi = min(hi if hi is not None else k, k - (op == "<"))
    if hi is not None and hi < lo:
        return None
    return lo, hi


_GREP_FLAGS = "nisvwxEFGPHhIaTUybz"
_GREP_LONG = {"--line-number", "--ignore-case", "--invert-match", "--word-regexp", "--line-regexp",
              "--extended-regexp", "--fixed-strings", "--basic-regexp", "--perl-regexp", "--with-filename",
              "--no-filename", "--color", "--colour", "--text", "--no-messages", "--regexp",
              "--after-context", "--before-context", "--context", "--max-count", "--binary-files",
              "--initial-tab", "--byte-offset", "--null-data"}


def _grep(args, state, out, stdin) -> _Role:
    """Lines matching a pattern of named files (never a recursive walk or a directory)."""
    args = ["-C" + a[1:] if a and re.fullmatch(r"-[0-9]+", a) else a for a in args]
    parsed = _getopt(args, _GREP_FLAGS, "eABCm", _GREP_LONG)
    if parsed is None:
        return None, None
    options, operands = parsed
    patterns = [v for o, v in options if o in ("-e", "--regexp")]
    if not patterns:
        patterns, operands = operands[:1], operands[1:]
    if not patterns or any(p is None for p in patterns):
        return None, None
    names = {o for o, _ in options}
    matching = "not matching" if names & {"-v", "--invert-match"} else "matching"
    words = f"lines {matching} " + " or ".join(f"'{p}'" for p in patterns)
    if names & {"-A", "-B", "-C", "--after-context", "--before-context", "--context"}:
        words += " with context"
    limit = next((v for o, v in options if o in ("-m", "--max-count")), None)
    if limit is not None:
        if _count(limit) is None:
            return None, None
        words = f"the first {limit} {words}"
    if operands:  # State.path refuses directory-looking words (grep shows nothing of them without -r)
        return _sources(operands, state, _View(part=words))

    def grep_filter(view: _View) -> _View:
        return _View(part=words if view == _WHOLE else f"{_describe(view)}, {words}")

    return None, grep_filter


def _tee(args, state, out, stdin) -> _Role:
    parsed = _getopt(args, "aip", "", {"--append", "--ignore-interrupts"})
    if parsed is None:
        return None, None
    for path in map(state.path, parsed[1]):
        if path is not None:
            out.append(Effect("write", path))
    return None, _identity


def _copy_or_move(args, state, out, stdin, *, move: bool) -> _Role:
    """`cp A B` writes B (A's content is not shown); `mv A B` writes both (A goes, B is replaced)."""
    # refused: -r/-a (a tree, not a file), -n/-u/-i (the copy may not happen), links
    parsed = _getopt(args, "fvbTp" if not move else "fvbT", "tS",
                     {"--force", "--verbose", "--backup", "--no-target-directory", "--target-directory",
                      "--suffix", "--preserve"})
    if parsed is None:
        return None, None
    options, operands = parsed
    directory = next((v for o, v in options if o in ("-t", "--target-directory")), None)
    if any(o in ("-t", "--target-directory") for o, _ in options):
        if directory is None:
            return None, None
        sources = operands
    elif len(operands) >= 2:
        sources, target = operands[:-1], operands[-1]
        if target is None:
            return None, None
        dir_like = target.endswith("/") or posixpath.basename(target) in (".", "..") or len(sources) > 1
        if not dir_like:
            for path in [*(map(state.path, sources) if move else ()), state.path(target)]:
                if path is not None:
                    out.append(Effect("write", path))
            return None, None
        directory = target
    else:
        return None, None
    for source in map(state.path, sources):
        if source is None:
            continue
        if move:
            out.append(Effect("write", source))
        path = state.path(posixpath.join(directory, posixpath.basename(source)))
        if path is not None:
            out.append(Effect("write", path))
    return None, None


def _rm(args, state, out, stdin) -> _Role:
    parsed = _getopt(args, "frRvd", "", {"--force", "--recursive", "--verbose", "--dir"})
    if parsed is None:
        return None, None
    for path in map(state.path, parsed[1]):
        if path is not None:
            out.append(Effect("write", path))
    return None, None


def _git(args, state, out, stdin) -> _Role:
    if args[:1] != ["apply"]:
        return None, None
    parsed = _getopt(args[1:], "Rv3", "p", {"--reverse", "--verbose", "--3way", "--index", "--reject",
                                             "--whitespace", "--recount", "--unidiff-zero",
                                             "--ignore-whitespace", "--ignore-space-change"})
    if parsed is None:
        return None, None  # among the refused: --check, --stat, --cached (nothing written)
    options, operands = parsed
    if operands not in ([], ["-"]) or stdin is None:
        return None, None
    strip = next((v for o, v in options if o == "-p"), "1")
    _patch_writes(stdin, _count(strip), state, out)
    return None, None


def _patch(args, state, out, stdin) -> _Role:
    parsed = _getopt(args, "NREflsutbv", "pFdB", {"--forward", "--reverse", "--silent", "--quiet",
                                                   "--batch", "--force", "--strip", "--fuzz",
                                                   "--no-backup-if-mismatch", "--backup"})
    if parsed is None or stdin is None:
        return None, None  # among the refused: --dry-run, -i FILE, -o FILE
    options, operands = parsed
    if operands:
        for path in map(state.path, operands[:1]):
            if path is not None:
                out.append(Effect("write", path))
        return None, None
    strip = next((v for o, v in options if o == "-p"), None) or next(
        (v for o, v in options if o == "--strip"), None)
    if strip is None:
        return None, None  # without -p, patch keeps only each name's last part
    _patch_writes(stdin, _count(strip), state, out)
    return None, None


def _patch_writes(body: str, strip: int | None, state: _State, out: list[Effect]) -> None:
    """Each file a unified diff's `---`/`+++` headers name: the new name, and the old one when the
    file is deleted or renamed."""
    if strip is None:
        return
    old = None
    for line in body.splitlines():
        if line.startswith("--- "):
            old = line[4:].split("\t")[0].strip()
        elif line.startswith("+++ ") and old is not None:
            new = line[4:].split("\t")[0].strip()
            names = [new] if new != "/dev/null" else []
            if old != "/dev/null" and (new == "/dev/null" or _strip(old, strip) != _strip(new, strip)):
                names.append(old)
            for name in names:
                path = state.path(_strip(name, strip))
                if path is not None:
                    out.append(Effect("write", path))
            old = None


def _strip(name: str, count: int) -> str | None:
    parts = name.split("/")
    return "/".join(parts[count:]) if len(parts) > count else None


_PY_FLAGS = "bBdEhiIOqsSuvx"


def _python(args: list[str | None], state: _State, out: list[Effect], stdin: str | None) -> None:
    """The files a Python script given in the command writes (`-c`, `-` or stdin, or a script this
    same command wrote by heredoc)."""
    script = None
    i = 0
    while i < len(args):
        a = args[i]
        if a == "-c":
            script = args[i + 1] if i + 1 < len(args) else None
            break
        if a in ("-W", "-X"):
            i += 2
            continue
        if a is not None and re.fullmatch(f"-[{_PY_FLAGS}]+", a):
            i += 1
            continue
        if a == "-":
            script = stdin
        elif a is not None and not a.startswith("-"):
            path = state.path(a)
            script = state.scripts.get(path) if path is not None else None
        break
    else:
        script = stdin
    if script:
        for literal in _script_writes(script):
            path = state.path(literal)
            if path is not None:
                out.append(Effect("write", path))


def _script_writes(source: str) -> list[str]:
    """Literal paths a script opens for writing: `open(P, "w")`, `Path(P).write_text(...)`."""
    try:
        with warnings.catch_warnings():  # a script's own SyntaxWarnings are not ours to print
            warnings.simplefilter("ignore")
            tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    nodes = list(ast.walk(tree))
    if any(isinstance(n, ast.Attribute) and n.attr == "chdir" or isinstance(n, ast.Name) and n.id == "chdir"
           for n in nodes):
        return []  # relative paths no longer resolve against the shell's directory
    # names bound once, to a string: `path = "x.py"; open(path, "w")`
    stores: dict[str, int] = {}
    for n in nodes:
        if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load):
            stores[n.id] = stores.get(n.id, 0) + 1
    constants = {t.id: n.value.value for n in nodes if isinstance(n, ast.Assign)
                 for t in n.targets if isinstance(t, ast.Name) and stores.get(t.id) == 1
                 and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)}

    def literal(e: ast.expr | None) -> str | None:
        if isinstance(e, ast.Constant) and isinstance(e.value, str):
            return e.value
        return constants.get(e.id) if isinstance(e, ast.Name) else None

    def mode(call: ast.Call, position: int) -> str | None:
        given = call.args[position] if len(call.args) > position else next(
            (k.value for k in call.keywords if k.arg == "mode"), None)
        return "r" if given is None else literal(given)

    def path_call(e: ast.expr) -> str | None:
        if isinstance(e, ast.Call) and len(e.args) == 1 and not e.keywords and (
                isinstance(e.func, ast.Name) and e.func.id == "Path"
                or isinstance(e.func, ast.Attribute) and e.func.attr == "Path"):
            return literal(e.args[0])
        return None

    found: list[tuple[int, int, str]] = []
    for n in nodes:
        if not isinstance(n, ast.Call):
            continue
        f, target, m = n.func, None, None
        if isinstance(f, ast.Name) and f.id == "open" and n.args:
            target, m = literal(n.args[0]), mode(n, 1)
        elif isinstance(f, ast.Attribute) and f.attr in ("write_text", "write_bytes"):
            target, m = path_call(f.value), "w"
        elif isinstance(f, ast.Attribute) and f.attr == "open":
            target, m = path_call(f.value), mode(n, 0)
        if target and m is not None and any(c in m for c in "wax+"):
            found.append((n.lineno, n.col_offset, target))
    return [t for _, _, t in sorted(found)]


_COMMANDS: dict[str, Callable[..., _Role]] = {
    "cat": _cat,
    "nl": _nl,
    "head": _head,
    "tail": _tail,
    "sed": _sed,
    "awk": _awk,
    "grep": _grep,
    "tee": _tee,
    "cp": functools.partial(_copy_or_move, move=False),
    "mv": functools.partial(_copy_or_move, move=True),
    "rm": _rm,
    "git": _git,
    "patch": _patch,
}
