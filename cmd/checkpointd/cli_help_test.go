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

// TestGlobalFlagsBeforeTheCommand: --url, --token and --data-dir may come
// before the command's name, as kubectl's do, and mean the same as after
// it; a 403 says its code once.
func TestGlobalFlagsBeforeTheCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	d := startServe(t, nil, storeArgs(dir, "")...)
	op := readSecret(t, tokenPath(dir))
	if _, errOut, err := runCLI(t, nil, "--url", d.URL, "--token", op, "drain", "start", "--reason", "deploy"); err != nil {
		t.Fatalf("checkpointd --url … --token … drain start: %v\n%s", err, errOut)
	}
	if out, _, err := runCLI(t, nil, "--url="+d.URL, "--data-dir", dir, "drain", "status"); err != nil || !strings.Contains(out, "deploy") {
		t.Errorf("checkpointd --url=… --data-dir … drain status: %v\n%s", err, out)
	}
	_, _, err := runCLI(t, nil, "--url", d.URL, "--token", "cpd_not-a-token", "drain", "cancel")
	if err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("a bad token before the command was not the one used: %v", err)
	}
	reader := strings.TrimSpace(newTokenIn(t, dir, "reader"))
	_, _, err = runCLI(t, nil, "--token", reader, "--url", d.URL, "drain", "cancel")
	if err == nil || !strings.Contains(err.Error(), "403 forbidden: ") || strings.Contains(err.Error(), "forbidden: forbidden") {
		t.Errorf("a reader's drain cancel: %v, want 403 forbidden said once", err)
	}
}

// newTokenIn creates a token of role in dir's database and returns it.
func newTokenIn(t *testing.T, dir, role string) string {
	t.Helper()
	out, errOut, err := runCLI(t, nil, "token", "create", "--data-dir", dir, "--role", role, "--name", role)
	if err != nil {
		t.Fatalf("token create: %v\n%s", err, errOut)
	}
	_, last := lastLine(t, out)
	return last
}

// TestHoistGlobalFlags: what moves, and what stays where it is.
func TestHoistGlobalFlags(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"checkpointd --token X drain start --reason r", "checkpointd drain start --reason r --token=X"},
		{"checkpointd --url=U --token X sessions show ID", "checkpointd sessions show ID --url=U --token=X"},
		{"checkpointd --token X events ID -- --raw", "checkpointd events ID --token=X -- --raw"},
		{"checkpointd drain start --token X", "checkpointd drain start --token X"},
		{"checkpointd --help", "checkpointd --help"},
		{"checkpointd --token", "checkpointd --token"},
		{"checkpointd --bogus 1 drain status", "checkpointd --bogus 1 drain status"},
	} {
		if got := strings.Join(hoistGlobalFlags(strings.Fields(tc.in)), " "); got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.in, got, tc.want)
		}
	}
}

// TestCompletion: `completion bash|zsh|fish` prints a script for the
// shell, and the binary answers what the scripts ask it: the words that
// may follow.
func TestCompletion(t *testing.T) {
	t.Parallel()
	for shell, want := range map[string]string{"bash": "complete -", "zsh": "#compdef checkpointd", "fish": "complete -c checkpointd"} {
		out, errOut, err := runCLI(t, nil, "completion", shell)
		if err != nil || !strings.Contains(out, want) || !strings.Contains(out, "--generate-shell-completion") {
			t.Errorf("completion %s: %v %s\n%s", shell, err, errOut, out)
		}
	}
	out, _, err := runCLI(t, nil, "sessions", "--generate-shell-completion")
	for _, word := range []string{"ls:", "show:", "park:", "end:", "drop:"} {
		if err != nil || !strings.Contains(out, word) {
			t.Errorf("completing `checkpointd sessions`: %v, lacks %s:\n%s", err, word, out)
		}
	}
}

// TestStreamsRefuseYAMLAndName: events and watch print a stream, which
// has no yaml or name form; they say so before asking the daemon.
func TestStreamsRefuseYAMLAndName(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"events", "ses_x", "-o", "yaml"}, {"watch", "-o", "name"}} {
		_, _, err := runCLI(t, nil, append(args, "--token", "t", "--url", "http://127.0.0.1:1")...)
		if err == nil || !strings.Contains(err.Error(), "prints a stream") {
			t.Errorf("%v: %v, want a refusal naming the stream", args, err)
		}
	}
}
