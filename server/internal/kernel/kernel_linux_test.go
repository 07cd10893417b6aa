package kernel

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stockade/stockade/internal/proctest"
	"github.com/stockade/stockade/internal/testenv"
	"github.com/stockade/stockade/jail"
)

// answer is the driver's answer as a test reads it: every field the
// driver sends (ReadFrame refuses unknown ones).
type answer struct {
	Started         string          `json:"started"`
	Hello           string          `json:"hello"`
	Python          string          `json:"python"`
	Token           string          `json:"token"`
	Status          string          `json:"status"`
	Result          *string         `json:"result"`
	ResultTruncated bool            `json:"result_truncated"`
	Error           json.RawMessage `json:"error"`
	Images          []string        `json:"images"`
	ImagesTruncated bool            `json:"images_truncated"`
	Results         []struct {
		Data         map[string]any `json:"data"`
		IsMainResult bool           `json:"is_main_result"`
		Truncated    bool           `json:"truncated"`
	} `json:"results"`
	ResultsTruncated bool `json:"results_truncated"`
}

var caps = RichCaps{Count: 4, Bundle: 1 << 16, Bytes: 1 << 16, Formats: []string{"png"}}

// driverJail prepares a jail that runs the driver, as the server's pool
// does: its channel passed as descriptor 3, its stdin a pipe. No server.
func driverJail(t *testing.T) (*jail.Prepared, *Conn, *os.File) {
	t.Helper()
	testenv.NeedJail(t)
	spec := jail.Spec{Args: Args(), Timeout: 20 * time.Second, OutputLimit: 1 << 20, Rootfs: jail.RootfsHost,
		TmpfsSize: 64 << 20, WorkdirMode: jail.WorkdirFresh, WorkSize: 64 << 20, Hostname: "stockade",
		Rlimits: jail.Rlimits{OpenFiles: 256, FileSize: 64 << 20},
		Cgroup:  jail.CgroupSpec{MemoryMax: 512 << 20, CPUs: 1, PidsMax: 128}, Seccomp: "python"}
	server, jailEnd, err := Socket()
	if err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	p, err := jail.Prepare(context.Background(), spec, jail.Streams{Stdin: r, Pass: []*os.File{jailEnd}})
	r.Close()
	jailEnd.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	conn, err := NewConn(server, 1<<20)
	server.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return p, conn, w
}

// A single-use run through the driver: the job and its bulk on the
// channel, the program's stdin its own, its files in /work, the channel
// closed before it runs (its first open is descriptor 3), its rich
// results left in the figure directory, its exit status the jail's.
func TestDriverRunsAJob(t *testing.T) {
	p, conn, stdin := driverJail(t)
	code := "import os, sys\n" +
		"print(open('/work/in.txt').read() + sys.stdin.read(), os.open('/dev/null', os.O_RDONLY))\n" +
		"display(6 * 7)\n" +
		"raise SystemExit(3)\n"
	n := len(code)
	job := Run{Op: "run", Code: &n, Files: []RunFile{{Name: "in.txt", Size: 5}}, ResultMax: 1000, Rich: caps,
		FigureDir: "/work/figures"}
	sent := make(chan error, 1)
	go func() {
		err := conn.SendRun(job, strings.NewReader(code), strings.NewReader("hello"))
		if err == nil {
			_, err = io.WriteString(stdin, "!")
		}
		stdin.Close()
		sent <- err
	}()
	var res *jail.Result
	if proctest.Within(t, time.Minute, func(ctx context.Context) { res, _ = p.Start(ctx, jail.StartOptions{}) }) {
		t.Fatal("the run did not end")
	}
	if err := <-sent; err != nil {
		t.Fatalf("send the job: %v", err)
	}
	if res.ExitCode != 3 || res.Stdout != "hello! 3\n" {
		t.Errorf("the run: exit %d, stdout %q, stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	var left struct {
		Results []struct {
			Data map[string]any `json:"data"`
		} `json:"results"`
		Truncated bool `json:"truncated"`
	}
	b, err := os.ReadFile(filepath.Join(p.Workdir(), "figures", "results.json"))
	if err != nil || json.Unmarshal(b, &left) != nil || len(left.Results) != 1 || left.Results[0].Data["text/plain"] != "42" {
		t.Errorf("the run's results: %s, %v", b, err)
	}
}

// SendRun sends each part of a run's bulk whole and says so when one is
// not the length its frame gave (the driver would read the next part's
// bytes as this one's).
func TestSendRunChecksLengths(t *testing.T) {
	server, peer, err := Socket()
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	conn, err := NewConn(server, 1<<20)
	server.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	got := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(peer)
		got <- string(b)
	}()
	n := 4
	job := Run{Op: "run", Code: &n, Files: []RunFile{{Name: "a", Size: 3}}}
	frame, _ := json.Marshal(job)
	if err := conn.SendRun(job, strings.NewReader("code"), strings.NewReader("abc")); err != nil {
		t.Fatalf("a job of the lengths its frame gives: %v", err)
	}
	job.Files[0].Size = 4
	if err := conn.SendRun(job, strings.NewReader("code"), strings.NewReader("abc")); err == nil || !strings.Contains(err.Error(), "3 bytes, 4 in its frame") {
		t.Errorf("a file shorter than its frame says: %v", err)
	}
	if err := conn.SendRun(job, strings.NewReader("code")); err == nil {
		t.Error("a job with a part missing was sent")
	}
	conn.Close()
	if b := <-got; !strings.HasPrefix(b, strconv.Itoa(len(frame))+"\n"+string(frame)+"codeabc") {
		t.Errorf("the first job on the wire: %q", b)
	}
}

// A session through the driver: the job, the hello (whose sender the
// kernel names, and whose layout the identity check reads), an exec with
// its three pipes, its started frame and its answer.
func TestDriverRunsASession(t *testing.T) {
	p, conn, stdin := driverJail(t)
	stdin.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = p.Start(ctx, jail.StartOptions{Lifetime: time.Minute})
	}()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(time.Minute)
	if err := conn.Send(Session{Op: "session", Hello: "h1"}, nil, deadline); err != nil {
		t.Fatal(err)
	}
	var h Hello
	if err := conn.ReadFrame(&h, deadline); err != nil || h.Hello != "h1" || h.Python == "" {
		t.Fatalf("the hello: %+v, %v", h, err)
	}
	if conn.Cred() == nil {
		t.Fatal("the hello came without the kernel's credentials")
	}
	img, err := ReadImage(int(conn.Cred().Pid))
	if err != nil || img == (Image{}) {
		t.Fatalf("the driver's layout: %v, %v", img, err)
	}
	alive := func() error { return nil }
	if err := Intact(int(conn.Cred().Pid), img, alive); err != nil {
		t.Errorf("the driver as it started: %v", err)
	}
	other := img
	other[6]++
	if err := Intact(int(conn.Cred().Pid), other, alive); err == nil || !strings.Contains(err.Error(), "replaced") {
		t.Errorf("another layout than the driver's: %v", err)
	}
	if err := Intact(int(conn.Cred().Pid), img, func() error { return os.ErrProcessDone }); err == nil || !strings.Contains(err.Error(), "ended") {
		t.Errorf("a pidfd that says the process is gone: %v", err)
	}
	var ends [6]*os.File
	for i := 0; i < 6; i += 2 {
		if ends[i], ends[i+1], err = os.Pipe(); err != nil {
			t.Fatal(err)
		}
		defer ends[i].Close()
		defer ends[i+1].Close()
	}
	inR, inW, outR, outW, errR, errW := ends[0], ends[1], ends[2], ends[3], ends[4], ends[5]
	req := Request{Op: "exec", Token: "x1", Code: "print('out')\n6 * 7", N: 1, ResultMax: 1000, ImagesMax: 1 << 20, Rich: caps}
	if err := conn.Send(req, []*os.File{inR, outW, errW}, deadline); err != nil {
		t.Fatal(err)
	}
	inR.Close()
	outW.Close()
	errW.Close()
	inW.Close()
	var started, a answer
	if err := conn.ReadFrame(&started, deadline); err != nil || started.Started != "x1" {
		t.Fatalf("the started frame: %+v, %v", started, err)
	}
	if err := conn.ReadFrame(&a, deadline); err != nil || a.Token != "x1" || a.Status != "ok" || a.Result == nil || *a.Result != "42" {
		t.Fatalf("the answer: %+v, %v", a, err)
	}
	out, _ := io.ReadAll(outR)
	if string(out) != "out\n" {
		t.Errorf("the cell's stdout: %q", out)
	}
	_ = errR
}
