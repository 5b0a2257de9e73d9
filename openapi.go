package checkpointd

import _ "embed" // the published API description is compiled into the binary

// OpenAPIYAML is the OpenAPI 3.1 document of the HTTP API: the file
// docs/openapi.yaml, served at GET /v1/openapi.yaml. Its schema references
// to the checkpoint document point at schema/checkpoint.v1.json beside it
// (CheckpointSchemaJSON). A test in package api checks it against the
// router and against the responses the API answers. Callers must not
// modify it.
//
//go:embed docs/openapi.yaml
var OpenAPIYAML []byte
