package main

import (
	"strings"
	"testing"
)

func TestConsoleSecureCookie(t *testing.T) {
	for _, c := range []struct {
		v, listen string
		want      bool
		err       bool
	}{
		{"auto", "127.0.0.1:8080", false, false},
		{"auto", "[::1]:8080", false, false},
		{"auto", "localhost:8080", false, false},
		{"auto", "0.0.0.0:8080", true, false},
		{"auto", "10.0.0.5:8080", true, false},
		{"always", "127.0.0.1:8080", true, false},
		{"never", "0.0.0.0:8080", false, false},
		{"sometimes", "0.0.0.0:8080", false, true},
	} {
		got, err := consoleSecureCookie(c.v, c.listen)
		if got != c.want || (err != nil) != c.err {
			t.Errorf("%s on %s: %v %v, want %v (error %v)", c.v, c.listen, got, err, c.want, c.err)
		}
	}
}

// TestListenWarnings: serve warns at start when it serves plain HTTP
// beyond loopback, and when the console's cookie is Secure on plain HTTP
// (a browser on http:// would drop it and loop back to the sign-in page).
func TestListenWarnings(t *testing.T) {
	for _, c := range []struct {
		listen string
		secure bool
		want   []string
	}{
		{"127.0.0.1:8080", false, nil},
		{"[::1]:8080", false, nil},
		{"localhost:8080", false, nil},
		{"127.0.0.1:8080", true, []string{"cookie is Secure (--console-secure-cookie always)"}},
		{"0.0.0.0:8080", true, []string{"plain HTTP on 0.0.0.0:8080, beyond loopback", "cookie is Secure (--console-secure-cookie auto"}},
		{":8080", false, []string{"plain HTTP on :8080, beyond loopback"}},
		{"192.168.1.10:8080", true, []string{"beyond loopback", "--console-secure-cookie never"}},
	} {
		got := listenWarnings(c.listen, c.secure)
		if len(got) != len(c.want) {
			t.Errorf("%s secure=%v: %q, want %d warnings", c.listen, c.secure, got, len(c.want))
			continue
		}
		for i, w := range c.want {
			if !strings.Contains(got[i], w) {
				t.Errorf("%s secure=%v: warning %q lacks %q", c.listen, c.secure, got[i], w)
			}
		}
	}
}
