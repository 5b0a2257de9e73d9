package store

import "testing"

func TestWithBinaryParameters(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://u@h:5432/db?sslmode=disable":                      "postgres://u@h:5432/db?binary_parameters=yes&sslmode=disable",
		"postgres://u@h/db?binary_parameters=no":                      "postgres://u@h/db?binary_parameters=no",
		"postgres://u@h/db?search_path=t_1&binary_parameters=yes&x=1": "postgres://u@h/db?search_path=t_1&binary_parameters=yes&x=1",
	} {
		if got := withBinaryParameters(in); got != want {
			t.Errorf("withBinaryParameters(%q) = %q, want %q", in, got, want)
		}
	}
}
