package kernel

import _ "embed"

// Source is the session driver (driver.py).
//
//go:embed driver.py
var Source string
