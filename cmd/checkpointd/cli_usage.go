package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/urfave/cli/v3"
)

// finishCommandTree gives every command of the tree the same usage
// conduct: a usage error is returned, in one line with the way to the
// help, and main prints it once (the CLI library would print "Incorrect
// Usage", then the whole help, and main the error again); a group given
// an unknown command says so (the library's fallback says "No help
// topic"); and `help A B` shows B's help (the library's stops at A).
func finishCommandTree(root *cli.Command) {
	root.Commands = append(root.Commands, helpCommand())
	_ = root.Walk(func(c *cli.Command) error {
		c.OnUsageError = usageError
		if len(c.Commands) > 0 && c.Action == nil {
			c.Action = groupAction
		}
		return nil
	})
}

// usageError is every command's OnUsageError: the library's message
// ("Required flag \"reason\" not set", "flag provided but not defined:
// -bogus") named after the command, with the way to its help.
func usageError(_ context.Context, c *cli.Command, err error, _ bool) error {
	msg := err.Error()
	if msg != "" {
		msg = strings.ToLower(msg[:1]) + msg[1:]
	}
	return fmt.Errorf("%s%s (see: %s --help)", commandPrefix(c), msg, c.FullName())
}

// commandPrefix is "drain start: " for a subcommand and nothing for the
// root, whose name main prints before every error.
func commandPrefix(c *cli.Command) string {
	if path := c.Path(); len(path) > 1 {
		return strings.Join(path[1:], " ") + ": "
	}
	return ""
}

// groupAction runs a command that only groups others when no known
// subcommand was named: help when nothing was, an error otherwise.
func groupAction(ctx context.Context, c *cli.Command) error {
	if c.Args().Present() {
		return unknownCommand(c, c.Args().First())
	}
	if c.Root() == c {
		return cli.ShowRootCommandHelp(c)
	}
	return cli.ShowSubcommandHelp(c)
}

func unknownCommand(c *cli.Command, name string) error {
	var names []string
	for _, sub := range c.VisibleCommands() {
		if sub.Name != "help" {
			names = append(names, sub.Name)
		}
	}
	return fmt.Errorf("%sunknown command %q; the commands are %s (see: %s --help)",
		commandPrefix(c), name, strings.Join(names, ", "), c.FullName())
}

// helpCommand replaces the library's root `help`, which shows the help of
// its first argument only: `help token create` showed token's.
func helpCommand() *cli.Command {
	return &cli.Command{
		Name:      "help",
		Aliases:   []string{"h"},
		Usage:     "show the commands, or the help of one: help COMMAND [SUBCOMMAND…]",
		ArgsUsage: "[COMMAND [SUBCOMMAND…]]",
		HideHelp:  true,
		Action: func(ctx context.Context, h *cli.Command) error {
			parent, c := (*cli.Command)(nil), h.Root()
			for _, name := range h.Args().Slice() {
				sub := c.Command(name)
				if sub == nil || sub.Name == "help" {
					return unknownCommand(c, name)
				}
				parent, c = c, sub
			}
			if parent == nil {
				return cli.ShowRootCommandHelp(c)
			}
			return cli.ShowCommandHelp(ctx, parent, c.Name)
		},
	}
}

// argError reports wrong positional arguments like a usage error, with
// the command's usage line.
func argError(c *cli.Command, what string) error {
	return fmt.Errorf("%s%s (usage: %s [options] %s)", commandPrefix(c), what, c.FullName(), c.ArgsUsage)
}
