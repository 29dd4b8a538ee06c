"""Shell completion, generated from the parser itself so that it cannot fall behind it:
`iomatrix completion bash|zsh|fish` prints a script for that shell that completes commands,
their sub-commands, their options and the choices of options and arguments that have them;
where an ID is taken (options.completes_ids marks the action), latest and the ids of the results
folder (--results on the line, or the default), as `iomatrix completion --ids KINDS` lists
them when asked; anything else completes as a file name. zsh and fish also show each command's
help line.
"""

from __future__ import annotations

import argparse
import shlex

from iomatrix.cli.options import COMPLETER

_FUNCTION = "_iomatrix_complete"


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _ids(parser: argparse.ArgumentParser) -> dict[str, str]:
    """Per option (or "@positional") that takes an ID, the kinds it takes, as --ids spells them.
    The script does not tell positionals apart: theirs are offered together (compare's BASE takes
    a session, its NEW a run)."""
    found: dict[str, list[str]] = {}
    for action in parser._actions:
        kinds = getattr(action, COMPLETER, None)
        if kinds is not None:
            key = action.option_strings[-1] if action.option_strings else "@positional"
            taken = found.setdefault(key, [])
            taken += [k for k in kinds.split(",") if k not in taken]
    return {key: ",".join(kinds) for key, kinds in found.items()}


def _words(parser: argparse.ArgumentParser) -> tuple[list[str], dict[str, list[str]]]:
    """A parser's options and sub-commands; and, per option or positional with choices, those."""
    words: list[str] = []
    choices: dict[str, list[str]] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            words += list(action.choices)
            continue
        words += [o for o in action.option_strings if o.startswith("--") or len(o) == 2]
        if action.choices is not None:
            key = action.option_strings[-1] if action.option_strings else "@positional"
            choices[key] = [str(c) for c in action.choices]
    return words, choices


def _case(paths: dict[str, argparse.ArgumentParser]) -> list[str]:
    """One bash `case` arm per command path ("iomatrix", "iomatrix kernels", ...)."""
    arms = []
    for path, parser in paths.items():
        words, choices = _words(parser)
        ids = _ids(parser)
        lines = [f"        {shlex.quote(path)})"]
        lines.append(f"            words={shlex.quote(' '.join(words))}")
        if "@positional" in ids:
            lines.append(f"            ids={ids['@positional']}")
        if choices or ids:
            lines.append('            case "$prev" in')
            for option, kinds in ids.items():
                if option != "@positional":
                    lines.append(f"                {option}) _iomatrix_id_reply {kinds}; return;;")
            for option, values in choices.items():
                if option == "@positional":
                    continue
                lines.append(
                    f"                {option}) "
                    f'COMPREPLY=($(compgen -W {shlex.quote(" ".join(values))} -- "$cur")); '
                    "return;;"
                )
            lines.append("            esac")
            if "@positional" in choices:
                lines.append(
                    f"            positional={shlex.quote(' '.join(choices['@positional']))}"
                )
        lines.append("            ;;")
        arms.append("\n".join(lines))
    return arms


def _paths(
    parser: argparse.ArgumentParser,
) -> tuple[dict[str, argparse.ArgumentParser], dict[str, list[str]]]:
    """Every command path ("iomatrix", "iomatrix kernels", "iomatrix kernels fetch") with its
    parser; and, per path, the names of its sub-commands (two levels, as the parser has)."""
    paths: dict[str, argparse.ArgumentParser] = {"iomatrix": parser}
    nested: dict[str, list[str]] = {"iomatrix": list(_subparsers(parser))}
    for name, sub in _subparsers(parser).items():
        paths[f"iomatrix {name}"] = sub
        nested[f"iomatrix {name}"] = list(_subparsers(sub))
        for name2, sub2 in _subparsers(sub).items():
            paths[f"iomatrix {name} {name2}"] = sub2
    return paths, nested


def _help_lines(parser: argparse.ArgumentParser) -> dict[str, str]:
    """Each sub-command's help line, by name."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return {a.dest: _one_line(a.help) for a in action._choices_actions}
    return {}


def _one_line(text: str | None) -> str:
    # argparse's %(default)s and the like are left out rather than expanded: a hint, not a manual.
    return " ".join((text or "").replace("%(", "(").split())


def bash(parser: argparse.ArgumentParser) -> str:
    """The bash completion script for `parser`."""
    paths, nested = _paths(parser)
    arms = "\n".join(_case(paths))
    sub_arms = "\n".join(
        f"            {shlex.quote(path)}) subs={shlex.quote(' '.join(names))};;"
        for path, names in nested.items()
        if names
    )
    return f"""# bash completion for iomatrix, generated by `iomatrix completion bash`.
# The ids of the results folder the line names (--results DIR, or the default), of the kinds
# in $1, asked of the iomatrix being completed; then file names (a folder names a result too).
_iomatrix_id_reply() {{
    local i results=()
    for ((i = 1; i < ${{#COMP_WORDS[@]}}; i++)); do
        case "${{COMP_WORDS[i]}}" in
            --results) results=(--results "${{COMP_WORDS[i+1]}}");;
            --results=*) results=("${{COMP_WORDS[i]}}");;
        esac
    done
    local ids
    ids=$(command "${{COMP_WORDS[0]}}" completion --ids "$1" "${{results[@]}}" 2>/dev/null)
    COMPREPLY=($(compgen -W "$ids" -- "$cur") $(compgen -f -- "$cur"))
}}
{_FUNCTION}() {{
    local cur="${{COMP_WORDS[COMP_CWORD]}}" prev="${{COMP_WORDS[COMP_CWORD-1]}}"
    local path="iomatrix" subs word i words="" positional="" ids=""
    # The command path so far: each word before the cursor that names a sub-command of it.
    for ((i = 1; i < COMP_CWORD; i++)); do
        word="${{COMP_WORDS[i]}}"
        subs=""
        case "$path" in
{sub_arms}
        esac
        if [[ " $subs " == *" $word "* ]]; then path="$path $word"; fi
    done
    case "$path" in
{arms}
    esac
    if [[ "$cur" == -* ]]; then
        COMPREPLY=($(compgen -W "$words" -- "$cur"))
    elif [[ -n "$positional" ]]; then
        COMPREPLY=($(compgen -W "$positional $words" -- "$cur"))
    elif [[ -n "$ids" ]]; then
        _iomatrix_id_reply "$ids"
    else
        COMPREPLY=($(compgen -W "$words" -- "$cur") $(compgen -f -- "$cur"))
    fi
}}
complete -o filenames -F {_FUNCTION} iomatrix
"""


def _zsh_arm(path: str, sub: argparse.ArgumentParser) -> str:
    """The zsh `case` arm of one command path: its commands, options, ids and choices."""
    words, choices = _words(sub)
    described = [f"{name}:{text}" for name, text in _help_lines(sub).items()]
    options = [w for w in words if w.startswith("-")]
    lines = [f"        {shlex.quote(path)})"]
    lines.append(f"            commands=({' '.join(map(shlex.quote, described))})")
    lines.append(f"            opts=({' '.join(map(shlex.quote, options))})")
    for option, kinds in _ids(sub).items():
        if option == "@positional":
            lines.append(f"            ids={kinds}")
        else:
            lines.append(
                f"            [[ $prev == {option} ]] && {{ _iomatrix_id_add {kinds}; return }}"
            )
    for option, values in choices.items():
        if option == "@positional":
            lines.append(f"            positional=({' '.join(map(shlex.quote, values))})")
        else:
            lines.append(
                f"            [[ $prev == {shlex.quote(option)} ]] && "
                f"{{ compadd -- {' '.join(map(shlex.quote, values))}; return }}"
            )
    lines.append("            ;;")
    return "\n".join(lines)


def zsh(parser: argparse.ArgumentParser) -> str:
    """The zsh completion script for `parser`: an autoloadable _iomatrix (save it as _iomatrix in
    a folder of $fpath), or sourced after compinit (`source <(iomatrix completion zsh)`)."""
    paths, nested = _paths(parser)
    sub_arms = "\n".join(
        f"            {shlex.quote(path)}) subs=({' '.join(map(shlex.quote, names))});;"
        for path, names in nested.items()
        if names
    )
    body = "\n".join(_zsh_arm(path, sub) for path, sub in paths.items())
    return f"""#compdef iomatrix
# zsh completion for iomatrix, generated by `iomatrix completion zsh`.
# The ids of the results folder the line names (--results DIR, or the default), of the kinds
# in $1, asked of the iomatrix being completed.
_iomatrix_id_add() {{
    local -a results
    local -i i
    for ((i = 2; i < CURRENT; i++)); do
        case ${{words[i]}} in
            --results) results=(--results "${{words[i+1]}}");;
            --results=*) results=("${{words[i]}}");;
        esac
    done
    compadd -- ${{(f)"$(command ${{words[1]}} completion --ids $1 $results 2>/dev/null)"}}
}}
{_FUNCTION}() {{
    # Not `path`: in zsh that is the array tied to $PATH.
    local cmdpath="iomatrix" word prev="${{words[CURRENT-1]}}"
    local -a subs commands opts positional
    local ids=""
    local -i i
    # The command path so far: each word before the cursor that names a sub-command of it.
    for ((i = 2; i < CURRENT; i++)); do
        word="${{words[i]}}"
        subs=()
        case "$cmdpath" in
{sub_arms}
        esac
        (( ${{subs[(Ie)$word]}} )) && cmdpath="$cmdpath $word"
    done
    case "$cmdpath" in
{body}
    esac
    if [[ "${{words[CURRENT]}}" == -* ]]; then
        compadd -- $opts
        return
    fi
    (( ${{#commands}} )) && _describe -t commands 'iomatrix command' commands
    (( ${{#positional}} )) && compadd -- $positional
    [[ -n $ids ]] && _iomatrix_id_add $ids
    (( ${{#commands}} + ${{#positional}} )) || _files
}}
if [[ "${{zsh_eval_context[-1]}}" == loadautofunc ]]; then
    {_FUNCTION} "$@"
else
    compdef {_FUNCTION} iomatrix
fi
"""


def _fish_quote(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _fish_line(at: str, action: argparse.Action) -> str | None:
    """The fish `complete` line of one option or positional of a command path (`at`); None for
    what is completed otherwise (sub-commands, hidden options, a plain positional)."""
    if isinstance(action, argparse._SubParsersAction) or action.help == argparse.SUPPRESS:
        return None
    kinds = getattr(action, COMPLETER, None)
    if not action.option_strings:
        if kinds is not None:
            # No -f: a folder names a result too.
            return f"complete -c iomatrix {at} -a '(__iomatrix_ids {kinds})'"
        if action.choices is not None:
            values = " ".join(str(c) for c in action.choices)
            return f"complete -c iomatrix {at} -f -a {_fish_quote(values)}"
        return None
    flags = [
        f"-l {o[2:]}" if o.startswith("--") else f"-s {o[1:]}"
        for o in action.option_strings
        if o.startswith("--") or len(o) == 2
    ]
    spec = " ".join(flags)
    if action.choices is not None:
        values = " ".join(str(c) for c in action.choices)
        spec += f" -x -a {_fish_quote(values)}"
    elif kinds is not None:
        spec += f" -r -a '(__iomatrix_ids {kinds})'"
    elif action.nargs != 0:
        spec += " -r"
    return f"complete -c iomatrix {at} {spec} -d {_fish_quote(_one_line(action.help))}"


def fish(parser: argparse.ArgumentParser) -> str:
    """The fish completion script for `parser` (save it as
    ~/.config/fish/completions/iomatrix.fish, or `iomatrix completion fish | source`)."""
    paths, nested = _paths(parser)
    sub_arms = "\n".join(
        f"            case {_fish_quote(path)}\n"
        f"                set subs {' '.join(map(_fish_quote, names))}"
        for path, names in nested.items()
        if names
    )
    lines: list[str] = []
    for path, sub in paths.items():
        at = f"-n {_fish_quote(f'__iomatrix_at {path}')}"
        for name, text in _help_lines(sub).items():
            lines.append(
                f"complete -c iomatrix {at} -f -a {_fish_quote(name)} -d {_fish_quote(text)}"
            )
        lines += [line for action in sub._actions if (line := _fish_line(at, action)) is not None]
    completions = "\n".join(lines)
    return f"""# fish completion for iomatrix, generated by `iomatrix completion fish`.
# The command path so far: each word before the cursor that names a sub-command of it.
function __iomatrix_path
    set -l tokens (commandline -opc)
    set -e tokens[1]
    set -l cmdpath iomatrix
    set -l subs
    for word in $tokens
        set subs
        switch "$cmdpath"
{sub_arms}
        end
        if contains -- $word $subs
            set cmdpath "$cmdpath $word"
        end
    end
    echo $cmdpath
end

function __iomatrix_at
    test (__iomatrix_path) = "$argv"
end

# The ids of the results folder the line names (--results DIR, or the default), of the kinds
# in $argv[1], asked of the iomatrix being completed.
function __iomatrix_ids
    set -l tokens (commandline -opc)
    set -l results
    for i in (seq 2 (count $tokens))
        switch $tokens[$i]
            case --results
                if test $i -lt (count $tokens)
                    set results --results $tokens[(math $i + 1)]
                end
            case '--results=*'
                set results $tokens[$i]
        end
    end
    command $tokens[1] completion --ids $argv[1] $results 2>/dev/null
end

{completions}
"""
