package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"reflect"
	"strings"
	"time"

	"github.com/coordrun/coordrun/supervisor"
	"go.yaml.in/yaml/v3"
)

// The jobs file's schema, and its reading.

// jobSpec is one entry of a jobs file.
type jobSpec struct {
	Name           string    `yaml:"name"`
	Schedule       string    `yaml:"schedule"`
	Command        yaml.Node `yaml:"command"`
	TZ             string    `yaml:"tz"`
	Overlap        string    `yaml:"overlap"`
	CatchUp        string    `yaml:"catch-up"`
	History        int       `yaml:"history"`
	HistorySuccess int       `yaml:"history-success"`
	HistoryFailed  int       `yaml:"history-failed"`
	RetryLost      int       `yaml:"retry-lost"`
	RetryFailed    int       `yaml:"retry-failed"`
	RetryBackoff   string    `yaml:"retry-backoff"`
	OnSuccess      yaml.Node `yaml:"on-success"`
	OnFailure      yaml.Node `yaml:"on-failure"`
	MaxRuntime     string    `yaml:"max-runtime"`
	Jitter         string    `yaml:"jitter"`
	OutputBytes    *int      `yaml:"output-bytes"`
	Holders        int       `yaml:"holders"`
}

// loadJobsFile reads a jobs file, naming the line of the first problem.
func loadJobsFile(file string) ([]*supervisor.CronJob, error) {
	b, err := os.ReadFile(file)
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return nil, fmt.Errorf("cannot read jobs file %s: %w", file, pe.Err)
	}
	if err != nil {
		return nil, err
	}
	jobs, err := jobsList(file, b)
	if err != nil {
		return nil, err
	}
	var out []*supervisor.CronJob
	seen := map[string]int{}
	for _, n := range jobs {
		at := func(format string, a ...any) error {
			return fmt.Errorf("%s:%d: %s", file, n.Line, fmt.Sprintf(format, a...))
		}
		var s jobSpec
		if err := n.Decode(&s); err != nil {
			return nil, at("%v", err)
		}
		if err := checkJobKeys(n); err != nil {
			return nil, fmt.Errorf("%s:%v", file, err)
		}
		if s.Name == "" {
			return nil, at("job without a name")
		}
		if line, dup := seen[s.Name]; dup {
			return nil, at("job %s already defined at line %d", s.Name, line)
		}
		seen[s.Name] = n.Line
		j := &supervisor.CronJob{Name: s.Name, Spec: s.Schedule, TZ: s.TZ, Overlap: s.Overlap, History: s.History, RetryLost: s.RetryLost,
			HistorySuccess: s.HistorySuccess, HistoryFailed: s.HistoryFailed,
			OutputBytes: 64 << 10, Holders: s.Holders}
		if s.OutputBytes != nil {
			j.OutputBytes = *s.OutputBytes
		}
		for _, hook := range []struct {
			key  string
			n    *yaml.Node
			argv *[]string
		}{{"on-success", &s.OnSuccess, &j.OnSuccess}, {"on-failure", &s.OnFailure, &j.OnFailure}} {
			switch hook.n.Kind {
			case yaml.ScalarNode:
				if strings.TrimSpace(hook.n.Value) != "" {
					*hook.argv = []string{"/bin/sh", "-c", hook.n.Value}
				}
			case yaml.SequenceNode:
				if err := hook.n.Decode(hook.argv); err != nil || len(*hook.argv) == 0 {
					return nil, at("job %s: %s: want a command", s.Name, hook.key)
				}
			case 0:
			default:
				return nil, at("job %s: %s must be a string or a list", s.Name, hook.key)
			}
		}
		j.RetryFailed, j.RetryBackoff = s.RetryFailed, 10*time.Second
		if s.RetryBackoff != "" {
			if j.RetryBackoff, err = time.ParseDuration(s.RetryBackoff); err != nil {
				return nil, at("job %s: retry-backoff: %v", s.Name, err)
			}
		}
		switch s.Command.Kind {
		case yaml.ScalarNode:
			if strings.TrimSpace(s.Command.Value) != "" {
				j.Argv = []string{"/bin/sh", "-c", s.Command.Value}
			}
		case yaml.SequenceNode:
			if err := s.Command.Decode(&j.Argv); err != nil {
				return nil, at("job %s: command: %v", s.Name, err)
			}
		case 0:
		default:
			return nil, at("job %s: command must be a string or a list", s.Name)
		}
		if s.CatchUp != "" {
			if j.CatchUp, err = time.ParseDuration(s.CatchUp); err != nil {
				return nil, at("job %s: catch-up: %v", s.Name, err)
			}
		}
		if s.Jitter != "" {
			if j.Jitter, err = time.ParseDuration(s.Jitter); err != nil {
				return nil, at("job %s: jitter: %v", s.Name, err)
			}
		}
		if s.MaxRuntime != "" {
			if j.MaxRuntime, err = time.ParseDuration(s.MaxRuntime); err != nil {
				return nil, at("job %s: max-runtime: %v", s.Name, err)
			}
		}
		if err := j.Validate(); err != nil {
			return nil, at("%v", err)
		}
		out = append(out, j)
	}
	return out, nil
}

// checkJobKeys rejects unknown keys in a job entry, with their line.
func checkJobKeys(n *yaml.Node) error {
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("%d: a job must be a mapping", n.Line)
	}
	known := map[string]bool{}
	for f := range reflect.TypeFor[jobSpec]().Fields() {
		known[f.Tag.Get("yaml")] = true
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k := n.Content[i]; !known[k.Value] {
			return fmt.Errorf("%d: unknown job key %q", k.Line, k.Value)
		}
	}
	return nil
}

// jobsList is the file's one top-level key, "jobs:", as its list of job
// nodes; anything else is named with its line and what was meant.
func jobsList(file string, b []byte) ([]*yaml.Node, error) {
	var root yaml.Node
	if err := yaml.NewDecoder(strings.NewReader(string(b))).Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s: empty file", file)
		}
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	const shape = `a jobs file is one key, "jobs:", holding a list whose items start with "- name:" (see coordrun help cron)`
	doc := &root
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		doc = doc.Content[0]
	}
	if doc.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s:%d: %s", file, doc.Line, shape)
	}
	var jobs *yaml.Node
	for i := 0; i+1 < len(doc.Content); i += 2 {
		k, v := doc.Content[i], doc.Content[i+1]
		if k.Value != "jobs" {
			return nil, fmt.Errorf("%s:%d: unknown top-level key %q; %s", file, k.Line, k.Value, shape)
		}
		jobs = v
	}
	switch {
	case jobs == nil || jobs.Tag == "!!null" || (jobs.Kind == yaml.SequenceNode && len(jobs.Content) == 0):
		return nil, fmt.Errorf("%s: no jobs (want a top-level \"jobs:\" list)", file)
	case jobs.Kind != yaml.SequenceNode:
		return nil, fmt.Errorf("%s:%d: \"jobs:\" is not a list; %s", file, jobs.Line, shape)
	}
	return jobs.Content, nil
}
