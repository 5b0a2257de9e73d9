// Redaction of a typed checkpoint document, field by field.

package checkpointd

import (
	"fmt"
	"reflect"

	"github.com/checkpointd/checkpointd/redact"
)

// RedactDocument redacts every string of doc in place and returns how many
// secrets it replaced. It walks the typed document rather than its JSON
// tree, so the write path decodes JSON once; it reaches every string field
// by reflection, so a field added to the schema can never be skipped. The
// schema's own keys carry no secret context (fencing_token is a number,
// idempotency_key is on the safe list), so the result equals redact.Tree's
// on the same document (a test holds them together).
//
// Errors: ErrInvalidCheckpoint wrapping redact.ErrUnredactable.
func RedactDocument(doc *Document) (int, error) {
	return redactValue(reflect.ValueOf(doc).Elem())
}

func redactValue(v reflect.Value) (int, error) {
	switch v.Kind() {
	case reflect.String:
		out, n, err := redact.String(v.String())
		if err != nil {
			return 0, fmt.Errorf("%w: %w", ErrInvalidCheckpoint, err)
		}
		if n > 0 {
			v.SetString(out)
		}
		return n, nil
	case reflect.Pointer:
		if v.IsNil() {
			return 0, nil
		}
		return redactValue(v.Elem())
	case reflect.Struct:
		total := 0
		for i := range v.NumField() {
			n, err := redactValue(v.Field(i))
			if err != nil {
				return 0, err
			}
			total += n
		}
		return total, nil
	case reflect.Slice:
		total := 0
		for i := range v.Len() {
			n, err := redactValue(v.Index(i))
			if err != nil {
				return 0, err
			}
			total += n
		}
		return total, nil
	}
	return 0, nil // numbers and booleans hold no secrets
}
