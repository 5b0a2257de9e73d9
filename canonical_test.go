package checkpointd

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// decodeGeneric decodes JSON as DecodeDocument does: numbers as json.Number.
func decodeGeneric(t testing.TB, s string) any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("decode %q: %v", s, err)
	}
	return v
}

func TestCanonicalJSON(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"scalars", `[null, true, false, "", 0]`, `[null,true,false,"",0]`},
		{"white space and key order", "{ \"b\" : [ 1 , 2 ],\n\t\"a\" : { \"d\":1, \"c\":2 } }", `{"a":{"c":2,"d":1},"b":[1,2]}`},
		{"empty containers", `{"a":{},"b":[]}`, `{"a":{},"b":[]}`},
		// RFC 8785 §3.2.3: keys ordered by UTF-16 code units, so U+1F600
		// (a surrogate pair) sorts before U+FB33.
		{"UTF-16 key order", `{"\u20ac":1,"\r":2,"\ufb33":3,"1":4,"\ud83d\ude00":5,"\u0080":6,"\u00f6":7}`,
			"{\"\\r\":2,\"1\":4,\"\u0080\":6,\"\u00f6\":7,\"\u20ac\":1,\"\U0001F600\":5,\"\ufb33\":3}"},
		{"prefix keys", `{"ab":1,"a":2,"":3}`, `{"":3,"a":2,"ab":1}`},
		{"short escapes", `"\" \\ \b \f \n \r \t"`, `"\" \\ \b \f \n \r \t"`},
		{"other control characters", `"\u0000\u0001\u001f\u007f"`, "\"\\u0000\\u0001\\u001f\x7f\""},
		{"no HTML or non-ASCII escaping", `"<a&b> é \u2028 \ud83d\ude00 \/"`, "\"<a&b> é \u2028 \U0001F600 /\""},
		{"integers", `[0, -1, 1.0, 1e2, 1E+2, 100e-2, -0, -0.0, 0e10, 2.50e1]`, `[0,-1,1,100,100,1,0,0,0,25]`},
		{"big integers stay exact", `[123456789012345678901234567890, 1.5e30, 9007199254740993]`,
			`[123456789012345678901234567890,1500000000000000000000000000000,9007199254740993]`},
		{"other numbers", `[1.5, -0.1, 1e-7, 0.000001, 1.25e-3, 3.14159265358979323846]`,
			`[1.5,-0.1,1e-07,1e-06,0.00125,3.141592653589793]`},
		{"tiny numbers underflow to zero", `[1e-400, -1e-400]`, `[0,0]`},
		{"huge non-integers round to float64", `[123456789012345678901234567890.5]`, `[123456789012345680000000000000]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := CanonicalJSON(decodeGeneric(t, tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, string(got)); diff != "" {
				t.Errorf("CanonicalJSON(%s) (-want +got):\n%s", tt.in, diff)
			}
			// Canonical output is a fixed point.
			again, err := CanonicalJSON(decodeGeneric(t, string(got)))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(string(got), string(again)); diff != "" {
				t.Errorf("not idempotent (-once +twice):\n%s", diff)
			}
		})
	}
}

func TestCanonicalJSONFloat64(t *testing.T) {
	// A tree decoded without UseNumber agrees with one decoded with it.
	in := `{"a":[1,100,1e21,1.5,-0,0.1,1e-7,9007199254740992]}`
	var plain any
	if err := json.Unmarshal([]byte(in), &plain); err != nil {
		t.Fatal(err)
	}
	fromFloat, err := CanonicalJSON(plain)
	if err != nil {
		t.Fatal(err)
	}
	fromNumber, err := CanonicalJSON(decodeGeneric(t, in))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(fromNumber), string(fromFloat)); diff != "" {
		t.Errorf("float64 tree (-json.Number +float64):\n%s", diff)
	}
}

func TestCanonicalJSONErrors(t *testing.T) {
	tests := []struct {
		name string
		in   any
	}{
		{"int", 1},
		{"struct", struct{}{}},
		{"nested unsupported", map[string]any{"a": []any{map[string]string{}}}},
		{"invalid UTF-8 string", "\xff"},
		{"invalid UTF-8 key", map[string]any{"\xc3": 1}},
		{"NaN", math.NaN()},
		{"infinity", math.Inf(-1)},
		{"not a number", json.Number("1x")},
		{"empty number", json.Number("")},
		{"integer too long", json.Number("1e400")},
		{"float out of range", json.Number("1.5e400" + strings.Repeat("0", 0) + "1")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, err := CanonicalJSON(tt.in); err == nil {
				t.Errorf("CanonicalJSON(%#v) = %s, want an error", tt.in, got)
			}
		})
	}
	if _, err := CanonicalJSON(json.Number("1e399")); err != nil {
		t.Errorf("CanonicalJSON(1e399): %v", err)
	}
}

// TestCanonicalJSONStable: two encodings of the same document, differing
// in key order and white space, give the same bytes.
func TestCanonicalJSONStable(t *testing.T) {
	raw := readTestdata(t, "checkpoint-full.json")
	var compact, indented bytes.Buffer
	if err := json.Compact(&compact, raw); err != nil {
		t.Fatal(err)
	}
	// Re-marshalling a map reorders the keys (encoding/json sorts them),
	// which differs from the file's order.
	reordered, err := json.MarshalIndent(fullTree(t), "", "    ")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Indent(&indented, raw, "  ", "\t"); err != nil {
		t.Fatal(err)
	}
	var want []byte
	for i, in := range [][]byte{raw, compact.Bytes(), indented.Bytes(), reordered} {
		tree, _, err := DecodeDocument(in, DefaultWorkflow())
		if err != nil {
			t.Fatal(err)
		}
		got, err := CanonicalJSON(tree)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			want = got
			continue
		}
		if diff := cmp.Diff(string(want), string(got)); diff != "" {
			t.Errorf("encoding %d (-want +got):\n%s", i, diff)
		}
	}
	hand1 := `{"schema_version":1,"run_id":"r","fencing_token":2,"role":"author","target":{"repo":"a/b","issue":3}}`
	hand2 := "{\"target\" : {\"issue\":3.0, \"repo\":\"a/b\"},\n \"role\":\"author\", \"fencing_token\":2e0, \"run_id\":\"r\", \"schema_version\":1}"
	var got [2][]byte
	for i, in := range []string{hand1, hand2} {
		tree, _, err := DecodeDocument([]byte(in), DefaultWorkflow())
		if err != nil {
			t.Fatal(err)
		}
		if got[i], err = CanonicalJSON(tree); err != nil {
			t.Fatal(err)
		}
	}
	if diff := cmp.Diff(string(got[0]), string(got[1])); diff != "" {
		t.Errorf("hand-written encodings (-first +second):\n%s", diff)
	}
}

func TestCompareUTF16(t *testing.T) {
	tests := []struct {
		a, b string
		want int // sign
	}{
		{"", "", 0},
		{"a", "a", 0},
		{"", "a", -1},
		{"a", "b", -1},
		{"ab", "a", 1},
		{"\u00e9", "\u00ea", -1},
		{"\U0001F600", "\uFB33", -1}, // surrogate 0xD83D < 0xFB33, though UTF-8 bytes say otherwise
		{"\uE000", "\U00010000", 1},
		{"\U0001F600", "\U0001F601", -1}, // same high surrogate
		{"\U0001F600", "\U00020000", -1},
		{"x\u00e9", "x\u0100", -1},
	}
	sign := func(n int) int {
		switch {
		case n < 0:
			return -1
		case n > 0:
			return 1
		}
		return 0
	}
	for _, tt := range tests {
		if got := sign(compareUTF16(tt.a, tt.b)); got != tt.want {
			t.Errorf("compareUTF16(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
		if got := sign(compareUTF16(tt.b, tt.a)); got != -tt.want {
			t.Errorf("compareUTF16(%q, %q) = %d, want %d", tt.b, tt.a, got, -tt.want)
		}
	}
}

func FuzzCanonicalJSON(f *testing.F) {
	f.Add([]byte(`{"b":[1,2.50,-0,1e2,"\u0001<"],"a":{"\ud83d\ude00":null,"\ufb33":true}}`))
	f.Add(readTestdata(f, "checkpoint-full.json"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		var v any
		if dec.Decode(&v) != nil {
			return
		}
		canon, err := CanonicalJSON(v)
		if err != nil {
			return // e.g. a number out of range
		}
		if !json.Valid(canon) {
			t.Fatalf("invalid JSON: %s", canon)
		}
		again, err := CanonicalJSON(decodeGeneric(t, string(canon)))
		if err != nil {
			t.Fatalf("canonical output %s does not re-encode: %v", canon, err)
		}
		if !bytes.Equal(canon, again) {
			t.Fatalf("not a fixed point:\n%s\n%s", canon, again)
		}
	})
}
