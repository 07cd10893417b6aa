package jail

import (
	"errors"
	"io/fs"
	"testing"
)

func TestSetupErrorKeepsItsCause(t *testing.T) {
	err := error(setupError("run directory", &fs.PathError{Op: "mkdir", Path: "/x", Err: fs.ErrPermission}))
	if !errors.Is(err, fs.ErrPermission) {
		t.Errorf("errors.Is(%v, ErrPermission) = false", err)
	}
	var pe *fs.PathError
	if !errors.As(err, &pe) || pe.Path != "/x" {
		t.Errorf("errors.As(%v, *PathError) lost the cause", err)
	}
	if got := err.Error(); got != "run directory: mkdir /x: permission denied" {
		t.Errorf("Error() = %q", got)
	}
	// What init reports crosses the socket as text only.
	fromInit := &SetupError{Step: "exec", Message: "python4: command not found", ExitCode: ExitNotFound}
	if fromInit.Error() != "exec: python4: command not found" || fromInit.Unwrap() != nil {
		t.Errorf("init's error: %q %v", fromInit.Error(), fromInit.Unwrap())
	}
}
