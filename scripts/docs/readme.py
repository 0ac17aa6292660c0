"""Keep README.md true: its usage blocks are `dlxtool ... --help`, its examples real runs of the demo.

    python scripts/docs/readme.py             # rewrite the --help blocks (fast; no broker)
    python scripts/docs/readme.py --check     # exit 1 naming stale or missing blocks (the test suite runs it)
    python scripts/docs/readme.py --examples  # also play scripts/demo (vhost dlxtool-demo) and refresh the
                                              # example blocks from its transcript and a few more real runs

README.md marks the generated parts; everything between the markers is replaced:

    <!-- help: dlxtool brokers check -->  ...  <!-- /help -->  `dlxtool brokers check --help`, 80 columns
    <!-- example: peek -->   ...   <!-- /example -->            scripts/demo's step "peek" (or EXTRAS["peek"])
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
WIDTH = 80  # --help is rendered at this width, whatever the terminal: the check must not depend on it

HELP = re.compile(r"(<!-- help: (?P<name>[^>]*?) -->\n)(?P<body>.*?)(<!-- /help -->)", re.S)
EXAMPLE = re.compile(r"(<!-- example: (?P<name>[^>]*?) -->\n)(?P<body>.*?)(<!-- /example -->)", re.S)

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


def problems(text: str) -> list[str]:
    """What makes README.md stale: help blocks that differ from --help, commands without one."""
    out = []
    found = set()
    for m in HELP.finditer(text):
        found.add(m.group("name"))
        if m.group("body") != help_block(m.group("name")):
            out.append(f"the `{m.group('name')} --help` block differs from --help")
    out += [f"no `<!-- help: {n} -->` block for `{n}`" for n in command_names() if n not in found]
    return out


# -- example blocks -------------------------------------------------------------------------------------


def example_commands(text: str) -> Iterator[tuple[str, list[str]]]:
    """(example name, argv after `dlxtool`) of every `$ dlxtool ...` line in the example blocks."""
    for m in EXAMPLE.finditer(text):
        for line in m.group("body").splitlines():
            if line.startswith("$ dlxtool "):
                yield m.group("name"), shlex.split(line[2:])[1:]


def play_demo(transcript: Path) -> dict[str, str]:
    env = {**os.environ, "DLXTOOL_DEMO_TRANSCRIPT": str(transcript), "NO_COLOR": "1"}
    subprocess.run([str(ROOT / "scripts" / "demo")], cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
    examples = {}
    for path in sorted(transcript.glob("*.txt")):
        examples[path.stem.split("-", 1)[1]] = path.read_text()
    vhost = os.environ.get("DLXTOOL_DEMO_VHOST", "dlxtool-demo")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DLXTOOL_")}
    env.update(NO_COLOR="1", COLUMNS=str(WIDTH), DLXTOOL_URL=f"amqp://guest:guest@localhost:5672/{vhost}",
               PATH=f"{ROOT / '.venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}")
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


def stale_examples(text: str, examples: dict[str, str]) -> list[str]:
    """Sentences in README's example blocks that the same steps no longer print (`examples`: name ->
    output of a fresh run, e.g. the demo's transcript). Numbers and spacing may differ; wording may not:
    text the code stopped printing (or prints differently) stays in README until --examples is run."""
    out = []
    for m in EXAMPLE.finditer(text):
        name = m.group("name")
        if name not in examples:
            continue
        now = {_shape(line) for line in examples[name].splitlines()}
        for line in m.group("body").splitlines():
            if _prose(line) and _shape(line) not in now:
                out.append(f"example {name!r}: {line.strip()!r} is no longer printed")
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
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 when README.md is stale")
    parser.add_argument("--examples", action="store_true", help="also play the demo and refresh the examples")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    text = README.read_text()
    if args.check:
        found = problems(text)
        for p in found:
            print(f"README.md: {p}", file=sys.stderr)
        if found:
            print("run: python scripts/docs/readme.py", file=sys.stderr)
        return 1 if found else 0
    new = render_help(text)
    if args.examples:
        with tempfile.TemporaryDirectory() as tmp:
            new = render_examples(new, play_demo(Path(tmp)))
    if new != text:
        README.write_text(new)
        print("README.md updated", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
