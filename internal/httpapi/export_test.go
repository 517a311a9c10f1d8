package httpapi

// RoutePatterns lists the ServeMux patterns of every route of the API, from the router's own table.
func RoutePatterns() []string {
	s := &server{}
	var out []string
	for _, rt := range s.routeTable() {
		out = append(out, rt.pattern)
	}
	return out
}
