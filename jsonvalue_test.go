package checkpointd

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
)

// decodeJSONValueV1 is what decodeJSONValue was before it moved to
// jsontext: encoding/json with UseNumber, one value, nothing after it.
func decodeJSONValueV1(raw []byte) (any, error) {
	if !utf8.Valid(raw) {
		return nil, ErrInvalidJSON
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if len(bytes.TrimLeft(raw[dec.InputOffset():], " \t\r\n")) > 0 {
		return nil, ErrInvalidJSON
	}
	return v, nil
}

// loneSurrogate is whether err refuses raw only for an escaped lone
// surrogate: jsontext says so, and with invalid UTF-8 allowed it reads the
// tree encoding/json reads (which has U+FFFD for it).
func loneSurrogate(raw []byte, err error, want any) bool {
	if !strings.Contains(err.Error(), "surrogate") {
		return false
	}
	dec := jsontext.NewDecoder(bytes.NewBuffer(raw), jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	got, rerr := readJSONValue(dec)
	return rerr == nil && reflect.DeepEqual(got, want)
}

// sameDecoding fails t unless decodeJSONValue and encoding/json agree on
// raw: both refuse it (decodeJSONValue with ErrInvalidJSON), or both read
// the same tree. The one difference allowed: an escaped lone surrogate,
// which encoding/json reads as U+FFFD, is refused.
func sameDecoding(t *testing.T, raw []byte) {
	t.Helper()
	got, err := decodeJSONValue(raw)
	want, wantErr := decodeJSONValueV1(raw)
	switch {
	case err != nil && !errors.Is(err, ErrInvalidJSON):
		t.Fatalf("%q: error %v does not wrap ErrInvalidJSON", raw, err)
	case err != nil && wantErr != nil:
	case err != nil && loneSurrogate(raw, err, want):
	case err != nil:
		t.Fatalf("%q: refused (%v); encoding/json reads %#v", raw, err, want)
	case wantErr != nil:
		t.Fatalf("%q: read %#v; encoding/json refuses it: %v", raw, got, wantErr)
	case !reflect.DeepEqual(got, want):
		t.Fatalf("%q: read %#v; encoding/json reads %#v", raw, got, want)
	}
}

var jsonValueCases = []string{
	``, ` `, "\t\r\n", `null`, `true`, `false`, `nul`, `tru`, `True`, `0`, `-0`, `01`, `-`, `+1`, `1.`, `.5`,
	`1e400`, `-1.5E-7`, `12345678901234567890123`, `0.1e+2`, `NaN`, `Infinity`, `1 2`, `1,`,
	`""`, `"a"`, `"\u00e9\n\t\"\\\/"`, `"\ud83d\ude00"`, `"\uD83D\uDE00"`, `"\ud800"`, `"\udc00"`, `"x\ud800y"`,
	`"\ud83d\u0041"`, `"\u0000"`, `"\x"`, `"\u12"`, "\"\x01\"", "\"\x7f\"", `"unterminated`, `'single'`,
	`{}`, `[]`, `[ ]`, `{ }`, `[1,]`, `{"a":1,}`, `{"a"}`, `{"a":}`, `{a:1}`, `{"a":1 "b":2}`, `[1 2]`,
	`{"a":1,"a":2}`, `{"a":{"b":1},"a":[1]}`, `{"":null}`, `[[[[]]]]`, `[{"a":[{"b":{}}]}]`, `{"a":[1,"2",true,null,{}]}`,
	`{}}`, `[]]`, `{"a":1}x`, `{"a":1} `, ` {"a":1}`, "{\"a\":1}\n\n", `{"a":1}{"b":2}`, `{"a":1`, `[1`,
	`{"é":"\u00e9"}`, `{"\u0061":1,"a":2}`,
}

// TestDecodeJSONValueMatchesEncodingJSON: jsontext reads what encoding/json
// reads, into the same tree, for the corners of the grammar, the
// repository's checkpoint documents (whole, cut at every byte and
// mutated), the redactor's and the published schema.
func TestDecodeJSONValueMatchesEncodingJSON(t *testing.T) {
	for _, c := range jsonValueCases {
		sameDecoding(t, []byte(c))
	}
	files, err := filepath.Glob("testdata/*.json")
	if err != nil {
		t.Fatal(err)
	}
	more, _ := filepath.Glob("redact/testdata/*.json")
	files = append(append(files, more...), "docs/schema/checkpoint.v1.json")
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sameDecoding(t, raw)
		if filepath.Dir(f) != "testdata" {
			continue
		}
		// Every cut of a checkpoint, and a byte flipped at every third
		// place (each place is as costly as a whole decode).
		for i := range raw {
			sameDecoding(t, raw[:i])
			if i%3 != 0 {
				continue
			}
			for _, b := range []byte{'"', '}', ',', '\\', ' '} {
				mutated := bytes.Clone(raw)
				mutated[i] = b
				sameDecoding(t, mutated)
			}
		}
	}
	// The difference allowed, asserted: a lone surrogate is refused.
	for _, c := range []string{`"\ud800"`, `{"note":"x\udfff"}`} {
		if _, err := decodeJSONValue([]byte(c)); !errors.Is(err, ErrInvalidJSON) {
			t.Errorf("%s: %v, want ErrInvalidJSON", c, err)
		}
	}
	// Nesting is bounded at 10,000 levels, as in encoding/json.
	for open, shut := range map[string]string{"[": "]", `{"a":`: "}"} {
		for depth, ok := range map[int]bool{10000: true, 10001: false} {
			deep := []byte(strings.Repeat(open, depth) + "1" + strings.Repeat(shut, depth))
			sameDecoding(t, deep)
			if _, err := decodeJSONValue(deep); (err == nil) != ok {
				t.Errorf("%d levels of %s: %v", depth, open, err)
			}
		}
	}
	// A refusal says what and where, not the members on the way there.
	_, err = decodeJSONValue([]byte(`{"password=hunter2":{"b":[1,"\x"]}}`))
	if !errors.Is(err, ErrInvalidJSON) || strings.Contains(err.Error(), "hunter2") || !strings.Contains(err.Error(), "after byte") {
		t.Errorf("error %q: want ErrInvalidJSON with an offset and no member name", err)
	}
}

// FuzzDecodeJSONValue holds decodeJSONValue to encoding/json on any input.
func FuzzDecodeJSONValue(f *testing.F) {
	for _, c := range jsonValueCases {
		f.Add([]byte(c))
	}
	f.Add(readTestdata(f, "checkpoint-full.json"))
	f.Add(readTestdata(f, "checkpoint-minimal.json"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		sameDecoding(t, raw)
	})
}
