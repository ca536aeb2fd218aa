#!/usr/bin/env python3
"""clidoc.py: the man page and the bash and zsh completion of a ddprun program, generated
from the program's own CLI11 definitions (its hidden --dump-cli-json, packaging/cli_dump.h),
so they never drift from --help. Run at build time by packaging/CMakeLists.txt:

    clidoc.py PROGRAM OUT_DIR DATE

writes OUT_DIR/man/NAME.1, OUT_DIR/bash/NAME, OUT_DIR/zsh/_NAME and OUT_DIR/NAME.json.
Python standard library only.
"""
import json
import os
import re
import subprocess
import sys


def load(program):
    out = subprocess.run([program, "--dump-cli-json"], check=True, stdout=subprocess.PIPE).stdout
    return json.loads(out)


def member_choices(opt):
    """The values CLI11's IsMember check allows ('TEXT:{a,b}'), else []."""
    m = re.search(r"\{([^{}]*)\}", opt["type_name"])
    return m.group(1).split(",") if m else []


def choices(opt):
    """What completes an option's value: member_choices, else the words of a metavar like
    'N|cpu|gpu' or 'static|c10d', else []."""
    if member_choices(opt):
        return member_choices(opt)
    return [w for w in opt["type_name"].split("|") if re.fullmatch(r"[a-z][a-z0-9-]*", w)] \
        if "|" in opt["type_name"] else []


def takes_path(opt):
    """Whether the option's value is a file or directory name (completed as one)."""
    return metavar(opt) in ("FILE", "DIR", "PATH", "COMMAND")


def metavar(opt):
    t = opt["type_name"].split(":")[0] if ":{" in opt["type_name"] else opt["type_name"]
    return t or "VALUE"


# ---- man page (roff, man macros) -------------------------------------------------------


def roff(text):
    """Plain text as roff: backslashes escaped, no line starting with a control character."""
    text = text.replace("\\", "\\e")
    lines = []
    for line in text.split("\n"):
        if line.startswith((".", "'")):
            line = "\\&" + line
        lines.append(line)
    return "\n".join(lines)


def roff_name(name):
    return roff(name).replace("-", "\\-")


def summary(app):
    """NAME line: the description's first sentence without its 'prog: ' prefix."""
    d = " ".join(app["description"].split())
    d = re.sub(r"^" + re.escape(app["name"]) + r":\s*", "", d)
    return d.split(". ")[0].rstrip(".")


def man_option(opt):
    if opt["positional"]:
        head = "\\fI" + roff(opt["positional"]) + "\\fR"
    else:
        head = ", ".join("\\fB" + roff_name(n) + "\\fR" for n in opt["names"])
        if opt["takes_value"]:
            head += " \\fI" + roff(metavar(opt)) + "\\fR"
    body = opt["description"] or ""
    extra = []
    if member_choices(opt):
        extra.append("one of: " + ", ".join(member_choices(opt)))
    if opt["default"]:
        extra.append("default: " + opt["default"])
    if opt["envname"]:
        extra.append("environment: " + opt["envname"])
    if extra:
        body = (body + " " if body else "") + "(" + "; ".join(extra) + ")"
    return ".TP\n" + head + "\n" + roff(body or "-") + "\n"


def man_options(options):
    out, groups = "", []
    for o in options:
        if o["group"] not in groups:
            groups.append(o["group"])
    for g in groups:
        if len(groups) > 1:
            out += '.SS "' + roff(g) + '"\n'
        out += "".join(man_option(o) for o in options if o["group"] == g)
    return out


def man_page(app, date):
    name = app["name"]
    usage = re.sub(r"^usage:\s*", "", app["usage"].strip())
    synopsis_args = usage[len(name):].strip() if usage.startswith(name) else usage
    out = '.TH "%s" 1 "%s" "%s %s" "User Commands"\n' % (name.upper(), date, name, app["version"])
    out += ".SH NAME\n%s \\- %s\n" % (roff_name(name), roff(summary(app)))
    out += ".SH SYNOPSIS\n.B %s\n%s\n" % (roff_name(name), roff(synopsis_args))
    desc = re.sub(r"^" + re.escape(name) + r":\s*", "", " ".join(app["description"].split()))
    out += ".SH DESCRIPTION\n" + roff(desc[:1].upper() + desc[1:]) + "\n"
    out += ".SH OPTIONS\n" + man_options(app["options"])
    for verb in app.get("verbs", []):
        out += '.SH "%s %s"\n' % (roff(name.upper()), roff(verb["name"].upper()))
        out += ".B %s %s\n[OPTIONS]\n.PP\n%s\n" % (roff_name(name), roff_name(verb["name"]),
                                                    roff(verb["description"][:1].upper()
                                                         + verb["description"][1:]))
        out += "".join(man_option(o) for o in verb["options"] if "--help" not in o["names"])
    if app["subcommands"]:
        out += ".SH COMMANDS\n"
        for sub in app["subcommands"]:
            out += ".SS %s\n%s\n" % (roff_name(sub["name"]), roff(" ".join(sub["description"].split())))
            out += "".join(man_option(o) for o in sub["options"] if "--help" not in o["names"])
    if app["footer"].strip():
        out += ".SH NOTES\n.nf\n" + roff(app["footer"].strip()) + "\n.fi\n"
    others = [p for p in ("ddprun", "ddprun-store") if p != name]
    out += ".SH SEE ALSO\n" + ", ".join("\\fB%s\\fR(1)" % roff_name(p) for p in others) + "\n"
    out += "The documentation in /usr/share/doc/ddprun, or docs/ in the source.\n"
    return out


# ---- bash -----------------------------------------------------------------------------


def flat_names(options, with_value):
    return [n for o in options if o["takes_value"] == with_value for n in o["names"]]


def bash_case_choices(options):
    out = ""
    for o in options:
        if o["takes_value"] and o["names"] and choices(o):
            out += '    %s) COMPREPLY=($(compgen -W "%s" -- "$cur")); return ;;\n' % (
                "|".join(o["names"]), " ".join(choices(o)))
    return out


def bash_verbs(verbs):
    """The case arms completing each verb's options (and their choices) once the first word
    is that verb."""
    out = ""
    for v in verbs:
        choices_ = bash_case_choices(v["options"]).replace("\n    ", "\n        ")
        out += """    %(name)s)
      if ((cword > 1)); then
        case "$prev" in
    %(choices)s        esac
        [[ " %(valued)s " == *" $prev "* ]] && return
        [[ $cur == -* ]] && COMPREPLY=($(compgen -W "%(opts)s" -- "$cur"))
        return
      fi ;;
""" % {"name": v["name"], "choices": choices_, "valued": " ".join(flat_names(v["options"], True)),
       "opts": " ".join(n for o in v["options"] for n in o["names"])}
    return out


def bash(app):
    fn = "_" + app["name"].replace("-", "_")
    head = "# bash completion for %s, generated by packaging/clidoc.py from `%s --dump-cli-json`.\n" % (
        app["name"], app["name"])
    if not app["subcommands"]:
        # Options up to the first word that is not an option (the training script); the
        # script's own arguments are files.
        return head + """%(fn)s() {
  local cur prev words cword
  _init_completion -s || return
  local valued=" %(valued)s "
  local paths=" %(paths)s "
  local i=1
  # A verb first (ddprun status ...): its own options, no files.
  case "${words[1]-}" in
%(verbs)s  esac
  while ((i < cword)); do
    case "${words[i]}" in
      --) break ;;
      -*=*) ;;
      -*) [[ $valued == *" ${words[i]} "* ]] && ((i++)) ;;
      *) _filedir; return ;;
    esac
    ((i++))
  done
  case "$prev" in
%(choices)s  esac
  if [[ $paths == *" $prev "* ]]; then _filedir; return; fi
  [[ $valued == *" $prev "* ]] && return  # a number, a host, ...: no file names
  if [[ $cur == -* ]]; then
    COMPREPLY=($(compgen -W "%(all)s" -- "$cur"))
    [[ ${COMPREPLY-} == *= ]] && compopt -o nospace
  else
    _filedir
    ((cword == 1)) && COMPREPLY+=($(compgen -W "%(verb_names)s" -- "$cur"))
  fi
}
complete -F %(fn)s %(name)s
""" % {"fn": fn, "name": app["name"], "valued": " ".join(flat_names(app["options"], True)),
       "paths": " ".join(n for o in app["options"] if o["takes_value"] and takes_path(o)
                         for n in o["names"]),
       "choices": bash_case_choices(app["options"]),
       "all": " ".join(n for o in app["options"] for n in o["names"]),
       "verbs": bash_verbs(app.get("verbs", [])),
       "verb_names": " ".join(v["name"] for v in app.get("verbs", []))}
    cases = ""
    for sub in app["subcommands"]:
        cases += '    %s) opts="%s"; valued=" %s " ;;\n' % (
            sub["name"], " ".join(n for o in sub["options"] for n in o["names"]),
            " ".join(flat_names(sub["options"], True)))
    all_choices = bash_case_choices([o for s in app["subcommands"] for o in s["options"]])
    return head + """%(fn)s() {
  local cur prev words cword
  _init_completion -s || return
  local cmd="" i
  for ((i = 1; i < cword; i++)); do
    [[ ${words[i]} != -* ]] && { cmd=${words[i]}; break; }
  done
  if [[ -z $cmd ]]; then
    COMPREPLY=($(compgen -W "%(subs)s %(top)s" -- "$cur"))
    return
  fi
  local opts="" valued=""
  case "$cmd" in
%(cases)s  esac
  case "$prev" in
%(choices)s  esac
  [[ $valued == *" $prev "* ]] && return
  [[ $cur == -* ]] && COMPREPLY=($(compgen -W "$opts" -- "$cur"))
}
complete -F %(fn)s %(name)s
""" % {"fn": fn, "name": app["name"], "subs": " ".join(s["name"] for s in app["subcommands"]),
       "top": " ".join(n for o in app["options"] for n in o["names"]), "cases": cases,
       "choices": all_choices}


# ---- zsh ------------------------------------------------------------------------------


def zq(text):
    """Single-quoted zsh word."""
    return "'" + text.replace("'", "'\\''") + "'"


def zsh_spec(opt):
    desc = " ".join(opt["description"].split()).replace("\\", "\\\\").replace("]", "\\]")
    desc = desc.replace("[", "\\[")
    action = "(%s)" % " ".join(choices(opt)) if choices(opt) else (
        "_files" if takes_path(opt) or opt["positional"] else " ")
    msg = metavar(opt).replace(":", "\\:")
    if opt["positional"]:
        return [zq("*:%s:%s" % (opt["positional"].lower(), action))]
    specs = []
    excl = "(" + " ".join(opt["names"]) + ")" if len(opt["names"]) > 1 else ""
    if "--help" in opt["names"] or "--version" in opt["names"]:
        excl = "(- *)"
    for n in opt["names"]:
        if opt["takes_value"]:
            eq = "=" if n.startswith("--") else "+"
            specs.append(zq("%s%s%s[%s]:%s:%s" % (excl, n, eq, desc, msg, action)))
        else:
            specs.append(zq("%s%s[%s]" % (excl, n, desc)))
    return specs


def zsh(app):
    fn = "_" + app["name"].replace("-", "_")
    head = "#compdef %s\n# zsh completion for %s, generated by packaging/clidoc.py from `%s --dump-cli-json`.\n" % (
        app["name"], app["name"], app["name"])
    specs = [s for o in app["options"] for s in zsh_spec(o)]
    if not app["subcommands"]:
        # -A '-*': no launcher options after the training script (its arguments are its own).
        first = "_files"
        if app.get("verbs"):  # the verbs too, for the first word
            first = "{_alternative 'files:training script:_files' 'verbs:verb:(%s)'}" % " ".join(
                v["name"] for v in app["verbs"])
        body = " \\\n    ".join(specs + [zq("1:training script:" + first),
                                       zq("*::script arguments:_files")])
        verbs = ""
        for v in app.get("verbs", []):  # ddprun status ...: the verb's own options
            vspecs = " \\\n      ".join(x for o in v["options"] for x in zsh_spec(o))
            verbs += ("  if [[ ${words[2]-} == %s ]] && ((CURRENT > 2)); then\n"
                      "    shift words; ((CURRENT--))\n    _arguments -s \\\n      %s\n"
                      "    return\n  fi\n" % (v["name"], vspecs))
        return head + "%s() {\n%s  _arguments -s -S -A '-*' \\\n    %s\n}\n%s \"$@\"\n" % (
            fn, verbs, body, fn)
    cmds = " ".join(zq("%s:%s" % (s["name"].replace(":", "\\:"), " ".join(s["description"].split())))
                    for s in app["subcommands"])
    cases = ""
    for s in app["subcommands"]:
        sub_specs = [x for o in s["options"] for x in zsh_spec(o)]
        cases += "    %s) _arguments -s \\\n        %s ;;\n" % (s["name"], " \\\n        ".join(sub_specs))
    return head + """%(fn)s() {
  local curcontext=$curcontext state line
  _arguments -C \\
    %(top)s \\
    '1:command:->command' '*::argument:->argument'
  case $state in
  command)
    local -a commands
    commands=(%(cmds)s)
    _describe command commands ;;
  argument)
    case $line[1] in
%(cases)s    esac ;;
  esac
}
%(fn)s "$@"
""" % {"fn": fn, "top": " \\\n    ".join(specs), "cmds": cmds, "cases": cases}


def main():
    if len(sys.argv) != 4:
        sys.exit("usage: clidoc.py PROGRAM OUT_DIR DATE")
    program, out_dir, date = sys.argv[1:]
    app = load(program)
    name = app["name"]
    files = {
        os.path.join("man", name + ".1"): man_page(app, date),
        os.path.join("bash", name): bash(app),
        os.path.join("zsh", "_" + name): zsh(app),
        name + ".json": json.dumps(app, indent=1) + "\n",
    }
    for rel, text in files.items():
        path = os.path.join(out_dir, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)


if __name__ == "__main__":
    main()
