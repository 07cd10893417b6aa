package jail

import "github.com/stockade/stockade/jail/internal/jailinit"

// SetupError is a jail that could not be set up: which step, and why. The
// CLI exits with ExitCode: 125, or 126/127 for a command that cannot run.
// It is init's own type, so that a step's failure reported from inside the
// jail and one on the parent's side are the same.
type SetupError = jailinit.SetupError

// setupError is the parent side's failure of step, exit status 125.
func setupError(step string, err error) *SetupError {
	return &SetupError{Step: step, Err: err, ExitCode: ExitJailError}
}
