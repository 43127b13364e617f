package journal

import "encoding/json"

// appendJSON appends the JSON encoding of e to buf.
func appendJSON(buf []byte, e *Event) ([]byte, error) {
	b, err := json.Marshal(e)
	if err != nil {
		return buf, err
	}
	return append(buf, b...), nil
}
