package api

import (
	"bytes"
	"net/http"

	"github.com/checkpointd/checkpointd"
)

// servedOpenAPI is the OpenAPI document as GET /v1/openapi.yaml serves it.
// In the repository its $refs name the schema file beside it
// (schema/checkpoint.v1.json); served, they name the route that serves the
// same bytes (GET /v1/schema/checkpoint), so a client that resolves the
// document against its own URL finds the schema either way.
var servedOpenAPI = bytes.ReplaceAll(checkpointd.OpenAPIYAML,
	[]byte(`$ref: "schema/checkpoint.v1.json`), []byte(`$ref: "schema/checkpoint`))

func (a *api) openapi(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/yaml")
	_, _ = w.Write(servedOpenAPI)
}
