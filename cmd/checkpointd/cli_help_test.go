package main

import (
	"strings"
	"testing"
)

// TestHelpNestedCommand proves `checkpointd help A B` prints B's help, as
// `checkpointd A B --help` does, not A's; and that help for a command
// that does not exist is an error that says so.
func TestHelpNestedCommand(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"help", "token", "create"}, {"token", "create", "--help"}, {"token", "help", "create"}} {
		out, _, err := runCLI(t, nil, args...)
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		if !strings.Contains(out, "checkpointd token create") || !strings.Contains(out, "--role") {
			t.Errorf("%v printed no help of token create:\n%s", args, out)
		}
	}
	out, _, err := runCLI(t, nil, "help", "token")
	if err != nil || !strings.Contains(out, "create") || !strings.Contains(out, "revoke") {
		t.Errorf("help token: %v\n%s", err, out)
	}
	for _, args := range [][]string{{"help", "token", "bogus"}, {"help", "bogus"}} {
		out, _, err := runCLI(t, nil, args...)
		if err == nil || !strings.Contains(err.Error(), `unknown command "bogus"`) || strings.Contains(err.Error(), "No help topic") {
			t.Errorf("%v: %v (want unknown command \"bogus\")\n%s", args, err, out)
		}
	}
}

// TestUsageErrorOnce proves a usage error (a missing required flag, an
// unknown flag, an unknown command) is one line, said once: no help
// dumped after it, no "Incorrect Usage" printed by the CLI library before
// main prints the error, and a hint where the usage is.
func TestUsageErrorOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args  []string
		wants []string
	}{
		{[]string{"drain", "start"}, []string{`"reason"`, "checkpointd drain start --help"}},
		{[]string{"token", "create", "--name", "x"}, []string{`"role"`, "checkpointd token create --help"}},
		{[]string{"drain", "status", "--bogus"}, []string{"bogus", "checkpointd drain status --help"}},
		{[]string{"drain", "bogus"}, []string{`unknown command "bogus"`, "drain", "start", "checkpointd drain --help"}},
		{[]string{"sessions", "bogus"}, []string{`unknown command "bogus"`, "ls", "checkpointd sessions --help"}},
		{[]string{"serv"}, []string{`unknown command "serv"`, "checkpointd --help"}},
	} {
		stdout, stderr, err := runCLI(t, nil, tc.args...)
		if err == nil {
			t.Errorf("%v succeeded", tc.args)
			continue
		}
		msg := err.Error()
		for _, w := range tc.wants {
			if !strings.Contains(msg, w) {
				t.Errorf("%v: error %q does not say %q", tc.args, msg, w)
			}
		}
		if strings.Contains(msg, "\n") || strings.Contains(msg, "No help topic") {
			t.Errorf("%v: error %q, want one line", tc.args, msg)
		}
		if stdout != "" || stderr != "" {
			t.Errorf("%v printed besides the error:\nstdout:\n%s\nstderr:\n%s", tc.args, stdout, stderr)
		}
	}
}

// TestErrorsNotPrefixedTwice proves no error repeats the program name
// main puts before it ("checkpointd: checkpointd sessions show: …").
func TestErrorsNotPrefixedTwice(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"sessions", "show"}, {"sessions", "show", "a", "b"}, {"sessions", "drop", "--reason", "x"}} {
		_, _, err := runCLI(t, nil, append(args, "--token", "t", "--url", "http://127.0.0.1:1")...)
		if err == nil {
			t.Errorf("%v succeeded", args)
			continue
		}
		if strings.HasPrefix(err.Error(), "checkpointd") {
			t.Errorf("%v: error %q starts with the program name, which main prints before it", args, err)
		}
		if !strings.Contains(err.Error(), args[0]+" "+args[1]) {
			t.Errorf("%v: error %q does not name the command", args, err)
		}
	}
}

// TestReadCommandsAskForAReaderToken proves the commands that only read
// say a reader token is enough when none is found, and the ones that
// change the daemon ask for an operator token.
func TestReadCommandsAskForAReaderToken(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"sessions", "ls"}, "a reader or operator token"},
		{[]string{"sessions", "show", "s"}, "a reader or operator token"},
		{[]string{"sessions", "drop", "s", "--reason", "x", "--yes"}, "an operator token"},
		{[]string{"drain", "start", "--reason", "x"}, "an operator token"},
	} {
		_, _, err := runCLI(t, nil, append(tc.args, "--data-dir", dir, "--url", "http://127.0.0.1:1")...)
		if err == nil || !strings.Contains(err.Error(), tc.want+" is required") {
			t.Errorf("%v: %v, want %q is required", tc.args, err, tc.want)
		}
	}
}
