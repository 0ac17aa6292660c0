"""Keep the docs true (README.md and docs/**/*.md): their usage blocks are `dlxtool ... --help`, their examples
real runs of the demo.

    python scripts/docs/readme.py             # rewrite the --help blocks (fast; no broker)
    python scripts/docs/readme.py --check     # exit 1 naming stale or missing blocks, or broken links between pages
    python scripts/docs/readme.py --examples  # also play scripts/demo (vhost dlxtool-demo) and refresh the
                                              # example blocks from its transcript and a few more real runs

The pages mark the generated parts; everything between the markers is replaced, in whichever page it is (a
name may appear in several: README.md shows six of the demo's steps that the command pages show too):

    <!-- help: dlxtool brokers check -->  ...  <!-- /help -->  `dlxtool brokers check --help`, 80 columns
    <!-- example: peek -->   ...   <!-- /example -->            scripts/demo's step "peek" (or EXTRAS["peek"])

Every command needs a help block in some page. Besides the example blocks, every `$ dlxtool ...` command line in a
```console block (and each `| dlxtool ...` stage of a pipeline there) must still parse.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
WIDTH = 80  # --help is rendered at this width, whatever the terminal: the check must not depend on it

HELP = re.compile(r"(<!-- help: (?P<name>[^>]*?) -->\n)(?P<body>.*?)(<!-- /help -->)", re.S)
EXAMPLE = re.compile(r"(<!-- example: (?P<name>[^>]*?) -->\n)(?P<body>.*?)(<!-- /example -->)", re.S)

# The six things people do at 3 a.m., one example each in README.md (scripts/demo's steps).
README_EXAMPLES = ("queues", "peek", "history", "decode", "replay", "purge")

# Examples the demo does not play; run after it against the same vhost, in this order.
EXTRAS: dict[str, str] = {
    "version": "dlxtool --version",
    "brokers-list": "dlxtool brokers list -f table",
    "brokers-check": "dlxtool brokers check -f table",
    "dump": "dlxtool dump orders.dlq -o .demo/orders-dlq.jsonl",
    "history-from": "dlxtool history --from .demo/orders-dlq-backup.jsonl -f table",
    "record": "head -n 1 .demo/orders-dlq-backup.jsonl | python3 -m json.tool",
    "completion": "dlxtool completion bash",
}

# Commands run around an extra, not shown: the demo ends with an empty DLQ, so the dump example first
# loads the demo's backup back into it, and empties it again afterwards.
AROUND: dict[str, tuple[str, str]] = {
    "dump": ("dlxtool load .demo/orders-dlq-backup.jsonl --yes -f json", "dlxtool purge orders.dlq --yes -f json"),
}


Docs = Mapping[str, str]  # page (path relative to ROOT, e.g. "docs/commands/peek.md") -> its text


def doc_paths(root: Path = ROOT) -> list[Path]:
    """README.md and every page under docs/."""
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def read_docs(root: Path = ROOT) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): p.read_text() for p in doc_paths(root)}


def _pages(docs: Docs | str) -> Docs:
    """A single text (an older caller's README.md) is taken as README.md alone."""
    return {"README.md": docs} if isinstance(docs, str) else docs


# -- --help blocks --------------------------------------------------------------------------------------


def help_text(name: str) -> str:
    """`NAME --help` (NAME: "dlxtool", "dlxtool peek", ...) exactly as a user sees it at WIDTH columns."""
    from click.testing import CliRunner

    from dlxtool.cli import cli
    from dlxtool.cli.app import App

    args = [*name.split()[1:], "--help"]
    result = CliRunner().invoke(cli, args, obj=App(env={}), terminal_width=WIDTH, prog_name="dlxtool",
                                env={"COLUMNS": str(WIDTH)})
    if result.exit_code != 0:
        raise SystemExit(f"readme.py: `{name} --help` failed: {result.output}")
    return result.output


def help_block(name: str) -> str:
    return f"```text\n$ {name} --help\n{help_text(name).rstrip()}\n```\n"


def command_names() -> list[str]:
    """The root and every command and subcommand: "dlxtool", "dlxtool brokers", "dlxtool brokers list", ..."""
    import click

    from dlxtool.cli import cli

    ctx = click.Context(cli)
    names: list[str] = ["dlxtool"]

    def walk(prefix: str, group: click.Group) -> None:
        for name in group.list_commands(ctx):
            cmd = group.get_command(ctx, name)
            full = f"{prefix} {name}".strip()
            names.append(full)
            if isinstance(cmd, click.Group):
                walk(full, cmd)

    walk("dlxtool", cli)
    return names


def render_help(text: str) -> str:
    return HELP.sub(lambda m: m.group(1) + help_block(m.group("name")) + m.group(4), text)


def problems(docs: Docs | str) -> list[str]:
    """What makes the docs stale: help blocks that differ from --help (named with their page), commands without
    one in any page."""
    out = []
    found = set()
    blocks: dict[str, str] = {}  # each name's --help rendered once
    for page, text in _pages(docs).items():
        for m in HELP.finditer(text):
            name = m.group("name")
            found.add(name)
            if name not in blocks:
                blocks[name] = help_block(name)
            if m.group("body") != blocks[name]:
                out.append(f"{page}: the `{name} --help` block differs from --help")
    out += [f"no `<!-- help: {n} -->` block for `{n}` in README.md or docs/" for n in command_names() if n not in found]
    return out


# -- links between pages ---------------------------------------------------------------------------------

LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")
FENCE = re.compile(r"^[ \t]*```.*?^[ \t]*```", re.S | re.M)


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped (hyphens and underscores kept), spaces to -."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    return {anchor(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", FENCE.sub("", text), re.M)}


def broken_links(docs: Docs) -> list[str]:
    """Relative links (`[text](path)`, `[text](path#anchor)`, `[text](#anchor)`) that lead to no page or no heading
    of it; links out (http:, mailto:) are not followed. Pages outside README.md and docs/ need only exist."""
    out = []
    for page, text in docs.items():
        for m in LINK.finditer(FENCE.sub("", text)):
            target = m.group("target")
            if re.match(r"^[a-z]+:", target):
                continue
            path, _, fragment = target.partition("#")
            to = (Path(page).parent / path).as_posix() if path else page
            to = os.path.normpath(to)
            if path and not (ROOT / to).exists():
                out.append(f"{page}: link to {target}: no such file")
            elif fragment and to in docs and fragment not in anchors(docs[to]):
                out.append(f"{page}: link to {target}: no such heading in {to}")
    return out


# -- example blocks -------------------------------------------------------------------------------------


CONSOLE = re.compile(r"^(?P<indent>[ \t]*)```console\n(?P<body>.*?)^(?P=indent)```", re.S | re.M)


def example_commands(docs: Docs | str) -> Iterator[tuple[str, list[str]]]:
    """(where, argv after `dlxtool`) of every dlxtool command line shown being run: each `$ ...` line (with its
    `\\` continuations) of a ```console block — the example blocks are such blocks — and each stage of it that runs
    dlxtool (`$ echo … | dlxtool decode`). `where`: "PAGE: example 'NAME'", else PAGE:LINE."""
    for page, text in _pages(docs).items():
        names = {m.start("body"): m.group("name") for m in EXAMPLE.finditer(text)}
        for block in CONSOLE.finditer(text):
            name = names.get(block.start() + len(block.group("indent")))
            for offset, line in _command_lines(block.group("body")):
                line_no = text.count("\n", 0, block.start("body")) + offset + 1
                where = f"{page}: example {name!r}" if name else f"{page}:{line_no}"
                for argv in _dlxtool_stages(line):
                    yield where, argv


def _command_lines(body: str) -> Iterator[tuple[int, str]]:
    """(line index in the block, the command) of each `$ ` line, joined with its `\\` continuation lines."""
    lines = [line.strip() for line in body.splitlines()]
    i = 0
    while i < len(lines):
        if lines[i].startswith("$ "):
            first, command = i, lines[i][2:]
            while command.endswith("\\") and i + 1 < len(lines):
                i += 1
                command = command[:-1] + " " + lines[i].strip()
            yield first, command
        i += 1


def _dlxtool_stages(command: str) -> Iterator[list[str]]:
    """The argv (after `dlxtool`) of each pipeline stage that runs dlxtool; redirections cut a stage short."""
    command = re.sub(r"(?<=\s)\d+(?=[<>])", "", command)  # a file descriptor's number (2>&1) is no argument
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    stage: list[str] = []
    for token in [*lexer, "|"]:
        if token and set(token) <= set("|&;<>()"):
            if stage[:1] == ["dlxtool"]:
                yield stage[1:]
            stage = [] if token in ("|", "||", "&&", ";", "&") else ["<cut>"]  # after a redirection: its target
            continue
        if stage[:1] != ["<cut>"]:
            stage.append(token)


def play_demo(transcript: Path) -> dict[str, str]:
    env = {**os.environ, "DLXTOOL_DEMO_TRANSCRIPT": str(transcript), "NO_COLOR": "1"}
    subprocess.run([str(ROOT / "scripts" / "demo")], cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
    examples = {}
    for path in sorted(transcript.glob("*.txt")):
        examples[path.stem.split("-", 1)[1]] = path.read_text()
    vhost = os.environ.get("DLXTOOL_DEMO_VHOST", "dlxtool-demo")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DLXTOOL_")}
    demo_dir = ROOT / os.environ.get("DLXTOOL_DEMO_DIR", ".demo")
    env.update(NO_COLOR="1", COLUMNS=str(WIDTH), DLXTOOL_URL=f"amqp://guest:guest@localhost:5672/{vhost}",
               PATH=f"{ROOT / '.venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}",
               # what dlxtool keeps (the journal of the extras' load and purge, compiled schemas) stays in the
               # demo's directory, as the demo's own runs do
               XDG_STATE_HOME=str(demo_dir / "state"), DLXTOOL_CACHE_DIR=str(demo_dir / "cache"))
    for name, command in EXTRAS.items():
        before, after = AROUND.get(name, ("true", "true"))
        subprocess.run(before, shell=True, cwd=ROOT, env=env, check=True, capture_output=True)
        proc = subprocess.run(command, shell=True, cwd=ROOT, env=env, capture_output=True, text=True)
        subprocess.run(after, shell=True, cwd=ROOT, env=env, check=True, capture_output=True)
        output = proc.stdout + proc.stderr
        if name == "completion":  # the script is long; its first lines show what it is
            output = "\n".join(output.splitlines()[:6]) + "\n…\n"
        examples[name] = f"$ {command}\n{output}"
    return examples


def _shape(line: str) -> str:
    """A line without what changes from run to run: numbers (counts, sizes, times, rates) and spacing."""
    shape = re.sub(r"\d+(?:[.,:]\d+)*", "#", line)
    shape = re.sub(r"# (?:KiB|MiB|GiB)\b", "# B", shape)  # a size's unit follows its number
    # peek's size estimate is there only once the management API has sampled the queue's bytes (a demo queue made
    # seconds before may have no sample yet: CI saw the line without it)
    shape = re.sub(r" \(about # B of message bodies\)", "", shape)
    return " ".join(shape.split())


def _prose(line: str) -> bool:
    """A sentence dlxtool wrote (a note, a warning, a summary), not a table row, JSON or a command line."""
    body = line.strip()
    if not body or body.startswith(("$ ", "{", "[", '"', "-", "#")) or "  " in body:
        return False
    return sum(word.isalpha() for word in re.split(r"[\s,;:()]+", body)) >= 5


def stale_examples(docs: Docs | str, examples: dict[str, str]) -> list[str]:
    """Sentences in the example blocks that the same steps no longer print (`examples`: name -> output of a
    fresh run, e.g. the demo's transcript). Numbers and spacing may differ; wording may not: text the code
    stopped printing (or prints differently) stays in the docs until --examples is run. Each stale sentence is
    named once per page (README.md's examples are named for README.md, a command page's for that page)."""
    out = []
    pages = _pages(docs)
    for page, text in pages.items():
        for m in EXAMPLE.finditer(text):
            name = m.group("name")
            if name not in examples:
                continue
            now = {_shape(line) for line in examples[name].splitlines()}
            for line in m.group("body").splitlines():
                if _prose(line) and _shape(line) not in now:
                    where = f"example {name!r}" if len(pages) == 1 else f"{page}: example {name!r}"
                    out.append(f"{where}: {line.strip()!r} is no longer printed")
    return out


def render_examples(text: str, examples: dict[str, str]) -> str:
    def block(m: re.Match[str]) -> str:
        name = m.group("name")
        if name not in examples:  # e.g. a step the demo plays only on some versions (dump before purge --backup)
            print(f"readme.py: warning: this run made no example {name!r} (scripts/demo steps, EXTRAS); "
                  "kept the old one", file=sys.stderr)
            return m.group(0)
        return f"{m.group(1)}```console\n{examples[name].rstrip()}\n```\n{m.group(4)}"

    return EXAMPLE.sub(block, text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 when a page is stale")
    parser.add_argument("--examples", action="store_true", help="also play the demo and refresh the examples")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    docs = read_docs()
    if args.check:
        found = problems(docs) + broken_links(docs)
        for p in found:
            print(f"readme.py: {p}", file=sys.stderr)
        if found:
            print("run: python scripts/docs/readme.py", file=sys.stderr)
        return 1 if found else 0
    new = {page: render_help(text) for page, text in docs.items()}
    if args.examples:
        with tempfile.TemporaryDirectory() as tmp:
            examples = play_demo(Path(tmp))
        new = {page: render_examples(text, examples) for page, text in new.items()}
    for page, text in new.items():
        if text != docs[page]:
            (ROOT / page).write_text(text)
            print(f"{page} updated", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
