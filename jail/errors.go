package jail

// SetupError is a jail that could not be set up: which step, and why. The
// CLI exits with ExitCode: 125, or 126/127 for a command that cannot run.
type SetupError struct {
	Step string
	// Message is the reason as text: what init reported from inside the
	// jail, where only text crosses the socket. Err is the cause when the
	// parent side had one; errors.Is and errors.As see it through Unwrap.
	Message  string
	Err      error
	ExitCode int
}

// setupError is the parent side's failure of step, exit status 125.
func setupError(step string, err error) *SetupError {
	return &SetupError{Step: step, Err: err, ExitCode: ExitJailError}
}

func (e *SetupError) Error() string {
	msg := e.Message
	if e.Err != nil {
		msg = e.Err.Error()
	}
	if e.Step == "" {
		return msg
	}
	return e.Step + ": " + msg
}

func (e *SetupError) Unwrap() error { return e.Err }
