package checkpointd

import (
	"strings"
	"testing"
)

// TestErrorRecordSanitized: the detail is redacted and bounded without
// splitting a character; header values and ids that are not plain are
// dropped.
func TestErrorRecordSanitized(t *testing.T) {
	e := ErrorRecord{Source: ErrorSourceWebhook, Code: strings.Repeat("c", 100),
		Detail:   "token ghp_abcdefghijklmnopqrstuvwxyz0123456789 " + strings.Repeat("é", MaxErrorDetail),
		Delivery: "id\nwith newline", Event: "push", SessionID: "not an id!"}.Sanitized()
	if strings.Contains(e.Detail, "ghp_") || !strings.Contains(e.Detail, "[REDACTED:") {
		t.Errorf("detail not redacted: %.80q", e.Detail)
	}
	if len(e.Detail) > MaxErrorDetail || !strings.HasSuffix(e.Detail, "é") {
		t.Errorf("detail %d bytes, cut mid-character or too long", len(e.Detail))
	}
	if len(e.Code) != MaxErrorCode || e.Delivery != "" || e.Event != "push" || e.SessionID != "" {
		t.Errorf("sanitized %+v", e)
	}
	if (ErrorRecord{}).Sanitized().Code != "unknown" {
		t.Error("an empty code is not replaced")
	}
}
