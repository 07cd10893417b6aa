package main

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/stockade/stockade/jail"
	"github.com/urfave/cli/v2"
)

// completionCommand prints a shell completion script. bash and zsh get a
// static script made from the command and flag tables (no hidden
// completion flag in the binary, which would turn a payload argument that
// happens to read --generate-bash-completion into a completion request);
// fish gets the CLI library's own generator.
func completionCommand(stdout io.Writer) *cli.Command {
	return &cli.Command{
		Name:      "completion",
		Usage:     "print a shell completion script (bash, zsh or fish)",
		ArgsUsage: "bash|zsh|fish",
		Description: "bash: stockade completion bash > /usr/share/bash-completion/completions/stockade\n" +
			"zsh:  stockade completion zsh > \"${fpath[1]}/_stockade\"\n" +
			"fish: stockade completion fish > ~/.config/fish/completions/stockade.fish",
		Action: func(c *cli.Context) error {
			var script string
			var err error
			switch c.Args().First() {
			case "bash":
				script = bashCompletion(c.App)
			case "zsh":
				script = zshCompletion(c.App)
			case "fish":
				script, err = c.App.ToFishCompletion()
			default:
				return &exitError{code: jail.ExitJailError, msg: "completion: give bash, zsh or fish"}
			}
			if err != nil {
				return &exitError{code: 1, msg: "completion: " + err.Error()}
			}
			_, err = io.WriteString(stdout, script)
			return err
		},
	}
}

// commandWords maps each visible command path ("run", "profile show") to
// its flags (--name) and subcommands.
func commandWords(app *cli.App) map[string][]string {
	words := map[string][]string{}
	var walk func(prefix string, cmds []*cli.Command)
	walk = func(prefix string, cmds []*cli.Command) {
		var names []string
		for _, c := range cmds {
			if c.Hidden {
				continue
			}
			names = append(names, c.Name)
			path := strings.TrimSpace(prefix + " " + c.Name)
			var w []string
			for _, f := range c.Flags {
				for _, n := range f.Names() {
					if len(n) == 1 {
						w = append(w, "-"+n)
					} else {
						w = append(w, "--"+n)
					}
				}
			}
			words[path] = w
			walk(path, c.Subcommands)
			for _, s := range c.Subcommands {
				if !s.Hidden {
					words[path] = append(words[path], s.Name)
				}
			}
		}
		if prefix == "" {
			words[""] = append(names, "--help", "--version")
		}
	}
	walk("", app.Commands)
	return words
}

func bashCompletion(app *cli.App) string {
	words := commandWords(app)
	keys := make([]string, 0, len(words))
	for k := range words {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString("# bash completion for stockade (stockade completion bash)\n_stockade() {\n")
	b.WriteString("  local cur path w i\n  cur=${COMP_WORDS[COMP_CWORD]}\n  path=\n")
	b.WriteString("  for ((i = 1; i < COMP_CWORD; i++)); do\n    w=${COMP_WORDS[i]}\n")
	b.WriteString("    [[ $w == -- ]] && return 0\n    [[ $w == -* ]] && continue\n")
	b.WriteString("    case \"${path:+$path }$w\" in\n")
	for _, k := range keys {
		if k != "" {
			fmt.Fprintf(&b, "      %q) path=%q ;;\n", k, k)
		}
	}
	b.WriteString("    esac\n  done\n  case $path in\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "    %q) w=%q ;;\n", k, strings.Join(words[k], " "))
	}
	b.WriteString("  esac\n  if [[ $cur == -* || -n $w ]]; then\n    COMPREPLY=($(compgen -W \"$w\" -- \"$cur\"))\n  fi\n")
	b.WriteString("  [[ ${#COMPREPLY[@]} -eq 0 ]] && COMPREPLY=($(compgen -f -- \"$cur\"))\n  return 0\n}\ncomplete -F _stockade stockade\n")
	return b.String()
}

func zshCompletion(app *cli.App) string {
	return "#compdef stockade\n# zsh completion for stockade (stockade completion zsh): the bash\n" +
		"# script through zsh's bashcompinit.\nautoload -U +X bashcompinit && bashcompinit\n" + bashCompletion(app)
}
