package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/stockade/stockade/jail"
	"github.com/stockade/stockade/rootfs"
	"github.com/stockade/stockade/rootfs/image"
	"github.com/stockade/stockade/vmtier"
	"github.com/urfave/cli/v2"
)

// rootfsCommand makes and checks prepared root directories for --rootfs.
func rootfsCommand(stdout, stderr io.Writer) *cli.Command {
	fail := func(err error) error { return &exitError{code: jail.ExitJailError, msg: err.Error()} }
	return &cli.Command{
		Name:  "rootfs",
		Usage: "build, import and check root filesystems for --rootfs",
		Subcommands: []*cli.Command{
			{
				Name:      "build",
				Usage:     "debootstrap a minimal Debian with python3 into DIR",
				ArgsUsage: "DIR",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "suite", Value: image.DefaultSuite, Usage: "Debian suite"},
					&cli.StringFlag{Name: "packages", Usage: "comma-separated packages to add (python3-numpy,...)"},
					&cli.StringSliceFlag{Name: "pip", Usage: "PyPI package (NAME or NAME==VERSION, wheels only) or /path/to/file.whl to pip install into the root (repeatable)"},
					&cli.StringFlag{Name: "mirror", Usage: "Debian mirror (default: the one apt uses on this host)"},
				},
				Action: func(c *cli.Context) error {
					if c.NArg() != 1 {
						return fail(fmt.Errorf("rootfs build: give one DIR"))
					}
					var pkgs []string
					for _, p := range strings.Split(c.String("packages"), ",") {
						if p = strings.TrimSpace(p); p != "" {
							pkgs = append(pkgs, p)
						}
					}
					err := image.Build(c.Context, c.Args().First(), image.BuildOptions{
						Suite: c.String("suite"), Packages: pkgs, Pip: c.StringSlice("pip"), Mirror: c.String("mirror"), Progress: stderr})
					if err != nil {
						return fail(err)
					}
					fmt.Fprintf(stdout, "built %s; run with: stockade run --rootfs %s -- python3\n", c.Args().First(), c.Args().First())
					return nil
				},
			},
			{
				Name:      "import",
				Usage:     "unpack an OCI image layout or a `docker save` archive into DIR, without Docker",
				ArgsUsage: "IMAGE DIR",
				Action: func(c *cli.Context) error {
					if c.NArg() != 2 {
						return fail(fmt.Errorf("rootfs import: give IMAGE and DIR"))
					}
					err := image.ImportWith(c.Context, c.Args().Get(0), c.Args().Get(1), image.ImportOptions{Progress: stderr})
					if err != nil {
						return fail(err)
					}
					fmt.Fprintf(stdout, "imported %s into %s\n", c.Args().Get(0), c.Args().Get(1))
					return nil
				},
			},
			{
				Name:      "vm-image",
				Usage:     "build the VM tier's images for the host's root, or for DIR (--rootfs DIR), ahead of the first vm run",
				ArgsUsage: "[DIR]",
				Action: func(c *cli.Context) error {
					if c.NArg() > 1 {
						return fail(fmt.Errorf("rootfs vm-image: give at most one DIR"))
					}
					spec := jail.Spec{Rootfs: jail.RootfsHost, Host: jail.DefaultHost()}
					if c.NArg() == 1 {
						dir, err := filepath.Abs(c.Args().First())
						if err != nil {
							return fail(err)
						}
						spec.Rootfs = dir
					}
					files, err := vmtier.BuildImages(spec, vmtier.Options{})
					if err != nil {
						return fail(err)
					}
					for _, f := range files {
						if fi, err := os.Stat(f); err == nil {
							fmt.Fprintf(stdout, "%s (%d MiB)\n", f, fi.Size()>>20)
						}
					}
					return nil
				},
			},
			{
				Name:      "check",
				Usage:     "say whether DIR can serve as a jail root; exit 0 or list the problems",
				ArgsUsage: "DIR",
				Action: func(c *cli.Context) error {
					if c.NArg() != 1 {
						return fail(fmt.Errorf("rootfs check: give one DIR"))
					}
					problems := rootfs.Check(c.Args().First())
					for _, p := range problems {
						fmt.Fprintln(stdout, p.String())
					}
					if len(problems) > 0 {
						return &exitError{code: 1, msg: fmt.Sprintf("%s: %d problem(s)", c.Args().First(), len(problems))}
					}
					fmt.Fprintf(stdout, "%s: ok\n", c.Args().First())
					return nil
				},
			},
		},
	}
}
