package api

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/checkpointd/checkpointd"
)

// readBody reads a JSON request body of at most limit bytes.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && mt != "application/problem+json") {
			return nil, errUnsupportedMediaType
		}
	}
	body, err := readAll(http.MaxBytesReader(w, r.Body, limit), r.ContentLength, limit)
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return nil, fmt.Errorf("%w: the limit is %d bytes", errPayloadTooLarge, limit)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %v", checkpointd.ErrInvalidJSON, err)
	}
	return body, nil
}

// readAll is io.ReadAll with the buffer sized from a declared
// Content-Length (bounded by limit: the length is the client's word), so a
// checkpoint body is read into one allocation instead of regrowing from
// 512 bytes. The extra byte lets the read see EOF without growing.
func readAll(r io.Reader, length, limit int64) ([]byte, error) {
	if length <= 0 || length > limit {
		return io.ReadAll(r)
	}
	buf := make([]byte, 0, length+1)
	for {
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
		if len(buf) == cap(buf) {
			// Longer than declared: the server would have refused, but
			// finish the ordinary way in any case.
			rest, err := io.ReadAll(r)
			return append(buf, rest...), err
		}
	}
}

// decode reads a JSON request body into v, rejecting unknown fields (422, so
// typos do not silently vanish), malformed JSON (400) and trailing data.
func decode(w http.ResponseWriter, r *http.Request, v any) error {
	body, err := readBody(w, r, checkpointd.MaxRequestBytes)
	if err != nil {
		return err
	}
	return decodeBody(body, v)
}

// decodeBody is decode for a body already read.
func decodeBody(body []byte, v any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return fmt.Errorf("%w: empty body", checkpointd.ErrInvalidJSON)
	}
	if !json.Valid(body) {
		return fmt.Errorf("%w: the body is not valid JSON", checkpointd.ErrInvalidJSON)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return checkpointd.Invalid("/"+te.Field, fmt.Sprintf("must be %s, not %s", te.Type, te.Value))
		}
		return checkpointd.Invalid("", err.Error())
	}
	if dec.More() {
		return fmt.Errorf("%w: trailing data after the JSON value", checkpointd.ErrInvalidJSON)
	}
	if ps := nulProblems(body); ps != nil {
		return &checkpointd.ValidationError{Kind: checkpointd.ErrInvalidRequest, Problems: ps}
	}
	return nil
}

// writeJSON writes v with status.
func writeJSON(w http.ResponseWriter, status int, v any) error {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// Pagination: limit defaults to 50 and is capped at 500; cursors are opaque
// (base64url of a small JSON object) so their content can change freely.
const (
	defaultLimit = 50
	maxLimit     = 500
)

func pageLimit(r *http.Request) (int, error) {
	s := r.URL.Query().Get("limit")
	if s == "" {
		return defaultLimit, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return 0, checkpointd.Invalid("limit", "must be an integer between 1 and 500")
	}
	return min(n, maxLimit), nil
}

// page reads a list request's limit and cursor.
func page(r *http.Request) (int, cursor, error) {
	limit, err := pageLimit(r)
	if err != nil {
		return 0, cursor{}, err
	}
	c, err := decodeCursor(r)
	return limit, c, err
}

type cursor struct {
	ID  string `json:"i,omitempty"`
	Seq int64  `json:"s,omitempty"`
	// At and Sort carry a session list's activity sort key (list
	// sessions): a cursor of one order is refused by the other.
	At   int64  `json:"t,omitempty"`
	Sort string `json:"o,omitempty"`
}

func encodeCursor(c cursor) string {
	b, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeCursor(r *http.Request) (cursor, error) {
	var c cursor
	s := r.URL.Query().Get("cursor")
	if s == "" {
		return c, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || json.Unmarshal(b, &c) != nil {
		return c, checkpointd.Invalid("cursor", "not a cursor this server issued")
	}
	return c, nil
}

// list is the shape of every list response.
type list[T any] struct {
	Items      []T     `json:"items"`
	NextCursor *string `json:"next_cursor"`
}

func newList[T any](items []T, limit int, next func(last T) cursor) list[T] {
	l := list[T]{Items: items}
	if l.Items == nil {
		l.Items = []T{}
	}
	if len(items) == limit {
		c := encodeCursor(next(items[len(items)-1]))
		l.NextCursor = &c
	}
	return l
}

// nulProblems names every string in a JSON body, member names included,
// that holds a NUL character. PostgreSQL cannot keep one in text and
// SQLite can: refusing it on the way in gives both backends one answer,
// a 422 naming the field, instead of an outage on one of them.
func nulProblems(body []byte) []checkpointd.Problem {
	if !bytes.Contains(body, []byte(`\u0000`)) {
		return nil // the only way a well-formed body spells NUL
	}
	type frame struct {
		array   bool
		index   int
		key     string
		haveKey bool
	}
	var (
		ps    []checkpointd.Problem
		stack []frame
		dec   = json.NewDecoder(bytes.NewReader(body))
	)
	pointer := func() string {
		var b strings.Builder
		for _, f := range stack {
			b.WriteByte('/')
			if f.array {
				b.WriteString(strconv.Itoa(f.index))
			} else {
				// Redacted before it is escaped, as every echoed name.
				b.WriteString(checkpointd.EscapePointerToken(checkpointd.RedactName(f.key)))
			}
		}
		return b.String()
	}
	// After a value, an object waits for its next key and an array moves
	// to its next index.
	next := func() {
		if n := len(stack); n > 0 {
			stack[n-1].index++
			stack[n-1].haveKey = false
		}
	}
	for {
		tok, err := dec.Token()
		if err != nil {
			return ps // the body decoded already: the end is the only error left
		}
		top := len(stack) - 1
		switch v := tok.(type) {
		case json.Delim:
			if v == '{' || v == '[' {
				stack = append(stack, frame{array: v == '['})
				continue
			}
			stack = stack[:top]
			next()
		case string:
			if top >= 0 && !stack[top].array && !stack[top].haveKey {
				stack[top].key, stack[top].haveKey = v, true
				if strings.ContainsRune(v, 0) {
					ps = append(ps, checkpointd.Problem{Path: pointer(), Message: "a member name must not contain NUL (U+0000)"})
				}
				continue
			}
			if strings.ContainsRune(v, 0) {
				ps = append(ps, checkpointd.Problem{Path: pointer(), Message: "must not contain NUL (U+0000)"})
			}
			next()
		default:
			next()
		}
	}
}
