// Command protodiff compares the wire-relevant shape of two compiled .proto
// files (FileDescriptorSets written by `protoc --descriptor_set_out`): every
// message, every field (name, number, label, type, type name, default,
// packed) and every enum value. It prints the facts present in only one of
// them and exits 1 if there are any.
//
// It is used by frame/pb/protodiff.sh to check pulsar_api.proto against a
// copy of the upstream PulsarApi.proto.
package main

import (
	"fmt"
	"os"
	"sort"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: protodiff OURS.pb THEIRS.pb")
		os.Exit(2)
	}
	ours, err := facts(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	theirs, err := facts(os.Args[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	onlyOurs, onlyTheirs := minus(ours, theirs), minus(theirs, ours)
	for _, f := range onlyOurs {
		fmt.Println("- only in ours:  ", f)
	}
	for _, f := range onlyTheirs {
		fmt.Println("+ only in theirs:", f)
	}
	fmt.Printf("%d facts in ours, %d in theirs, %d differences\n",
		len(ours), len(theirs), len(onlyOurs)+len(onlyTheirs))
	if len(onlyOurs)+len(onlyTheirs) > 0 {
		os.Exit(1)
	}
}

func facts(path string) (map[string]bool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var set descriptorpb.FileDescriptorSet
	if err := proto.Unmarshal(b, &set); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	out := map[string]bool{}
	for _, f := range set.GetFile() {
		prefix := f.GetPackage()
		for _, e := range f.GetEnumType() {
			enumFacts(out, prefix, e)
		}
		for _, m := range f.GetMessageType() {
			messageFacts(out, prefix, m)
		}
	}
	return out, nil
}

func messageFacts(out map[string]bool, prefix string, m *descriptorpb.DescriptorProto) {
	name := prefix + "." + m.GetName()
	out["message "+name] = true
	for _, f := range m.GetField() {
		def := "-"
		if f.DefaultValue != nil {
			def = f.GetDefaultValue()
		}
		packed := "-"
		if f.GetOptions() != nil && f.GetOptions().Packed != nil {
			packed = fmt.Sprint(f.GetOptions().GetPacked())
		}
		out[fmt.Sprintf("field %s.%s number=%d label=%s type=%s type_name=%s default=%s packed=%s",
			name, f.GetName(), f.GetNumber(),
			strings.TrimPrefix(f.GetLabel().String(), "LABEL_"),
			strings.TrimPrefix(f.GetType().String(), "TYPE_"),
			f.GetTypeName(), def, packed)] = true
	}
	for _, e := range m.GetEnumType() {
		enumFacts(out, name, e)
	}
	for _, n := range m.GetNestedType() {
		messageFacts(out, name, n)
	}
}

func enumFacts(out map[string]bool, prefix string, e *descriptorpb.EnumDescriptorProto) {
	name := prefix + "." + e.GetName()
	out["enum "+name] = true
	for _, v := range e.GetValue() {
		out[fmt.Sprintf("enum_value %s.%s = %d", name, v.GetName(), v.GetNumber())] = true
	}
}

func minus(a, b map[string]bool) []string {
	var r []string
	for k := range a {
		if !b[k] {
			r = append(r, k)
		}
	}
	sort.Strings(r)
	return r
}
