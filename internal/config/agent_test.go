package config

import (
	"fmt"
	"reflect"
	"testing"
)

// TestAgentConversion keeps the file's agent and chat's from drifting apart: every field of chat.Agent
// is set from the file, and every key of the file's agent reaches chat.Agent. A field added to either
// fails here until agent() converts it.
func TestAgentConversion(t *testing.T) {
	var all fileAgent
	fill(reflect.ValueOf(&all).Elem())
	for _, path := range unset(reflect.ValueOf(all.agent()), "chat.Agent") {
		t.Errorf("%s is not set from the config file's agent: convert it in fileAgent.agent", path)
	}

	typ := reflect.TypeFor[fileAgent]()
	for i := range typ.NumField() {
		var one fileAgent
		fill(reflect.ValueOf(&one).Elem().Field(i))
		if reflect.ValueOf(one.agent()).IsZero() {
			t.Errorf("the agent's %s (%s) does not reach chat.Agent: convert it in fileAgent.agent", typ.Field(i).Tag.Get("yaml"), typ.Field(i).Name)
		}
	}
}

// fill sets v and everything under it to a value that is not zero.
func fill(v reflect.Value) {
	switch v.Kind() {
	case reflect.String:
		v.SetString("x")
	case reflect.Int, reflect.Int64:
		v.SetInt(1)
	case reflect.Float64:
		v.SetFloat(0.5)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		fill(p.Elem())
		v.Set(p)
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 1, 1)
		fill(s.Index(0))
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(k)
		fill(e)
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i))
			}
		}
	case reflect.Interface:
		v.Set(reflect.ValueOf("x"))
	default:
		panic(fmt.Sprintf("fill: add a case for %s", v.Kind()))
	}
}

// unset lists the paths of the fields under v that are zero, following pointers and structs.
func unset(v reflect.Value, path string) []string {
	if v.IsZero() {
		return []string{path}
	}
	switch v.Kind() {
	case reflect.Pointer:
		return unset(v.Elem(), path)
	case reflect.Struct:
		var out []string
		for i := range v.NumField() {
			if f := v.Type().Field(i); f.IsExported() {
				out = append(out, unset(v.Field(i), path+"."+f.Name)...)
			}
		}
		return out
	}
	return nil
}
