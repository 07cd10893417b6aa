package api

import "time"

// Health is GET /v1/health.
type Health struct {
	Status   string               `json:"status"`
	Version  string               `json:"version"`
	Profiles []string             `json:"profiles"`
	Pool     map[string]PoolStats `json:"pool"`
	Running  int                  `json:"running"`
	Queued   int                  `json:"queued"`
	Budget   map[string]int64     `json:"budget"`
	Audit    AuditHealth          `json:"audit"`
	Host     []string             `json:"host"`
}

// AuditHealth is what /v1/health says of the audit log.
type AuditHealth struct {
	Log      string `json:"log"`      // its path, "stderr", or "" for none
	Required bool   `json:"required"` // --audit-required: no run without its line
	Failing  bool   `json:"failing"`  // the last line could not be written
	// LostLines counts lines not written since the server started (with
	// --audit-required, the runs refused for it among them).
	LostLines     int64      `json:"lost_lines"`
	LastError     string     `json:"last_error,omitempty"`
	LastErrorTime *time.Time `json:"last_error_time,omitempty"`
}

// PoolStats is what GET /v1/health reports of one profile's pool.
type PoolStats struct {
	Target      int `json:"target"`
	Ready       int `json:"ready"`
	Preparing   int `json:"preparing"`
	Hits        int `json:"hits"`
	Misses      int `json:"misses"`
	DiedWaiting int `json:"died_waiting"` // discarded: the jail ended while waiting
	Failed      int `json:"failed"`       // set-ups that failed
	Evicted     int `json:"evicted"`      // given up to make room in the budget
}
