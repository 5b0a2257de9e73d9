package main

import "testing"

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
