#!/usr/bin/python3
"""Least-privilege check of the deployment's RBAC against what the components really did.

    /usr/bin/python3 tests/deploy/rbac_check.py --manifests RENDERED.yaml --audit AUDIT.json
        [--strict] [--component NAME ...] [--map NAME=NAMESPACE/SERVICEACCOUNT ...]

RENDERED.yaml: the manifests as applied (`kubectl kustomize deploy/overlays/...`), several
documents in one file ("-": standard input). AUDIT.json: the simulated API server's request log,
`kubectl get --raw /sim/audit` ({"requests": [{"user_agent", "verb", "group", "resource",
"subresource", "namespace", "name"}, ...]}).

Each component is known to the API server by its User-Agent (hami-scheduler, hami-device-plugin,
hami-monitor by default; --component replaces the list). A component runs as the ServiceAccount
of the workload (Deployment, DaemonSet, StatefulSet, Job, Pod) with a container whose command
(else args, else the container's name) is the component's program; --map names it instead. The
ServiceAccount's grants are the rules of the Roles and ClusterRoles the manifests define and
bind to it (a RoleBinding grants in its own namespace only; a ClusterRoleBinding everywhere); a
binding to a role the manifests do not define (the cluster's system:kube-scheduler, say) is
reported and grants nothing here, so every request a component makes must be granted by the
deployment's own roles.

An audit whose "dropped" count is not 0 lost its oldest requests: that is a warning.

Errors (exit 1):
  - a request (verb, group, resource, subresource) a component made that its ServiceAccount's
    roles do not grant, with how often and an example namespace and name;
  - a component in the audit that no workload runs.
Warnings (errors with --strict):
  - a grant (role, verb, group, resource, resourceName) that no request of the components
    sharing the ServiceAccount used;
  - a wildcard ("*") in a rule's apiGroups, resources or verbs;
  - a component that made no request at all.
Bad input (a file that cannot be read or parsed, a document or request without the fields
named above) exits 2 with a message naming the file and what is wrong.
"""

import argparse
import collections
import json
import sys

try:
    import yaml
except ImportError:  # pragma: no cover - Debian's python3-yaml belongs to /usr/bin/python3
    sys.stderr.write("rbac_check: PyYAML is missing (Debian package python3-yaml; run with "
                     "/usr/bin/python3)\n")
    sys.exit(2)

DEFAULT_COMPONENTS = ("hami-scheduler", "hami-device-plugin", "hami-monitor")
WORKLOAD_KINDS = ("Deployment", "DaemonSet", "StatefulSet", "Job", "Pod")
AUDIT_FIELDS = ("user_agent", "verb", "group", "resource", "subresource", "namespace", "name")


class BadInput(Exception):
    pass


def load_manifests(path):
    try:
        text = sys.stdin.read() if path == "-" else open(path, encoding="utf-8").read()
    except OSError as e:
        raise BadInput(f"{path}: cannot read: {e.strerror}")
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as e:
        raise BadInput(f"{path}: not YAML: {e}")
    out = []
    for i, d in enumerate(docs):
        if not isinstance(d, dict) or "kind" not in d:
            raise BadInput(f"{path}: document {i}: not a Kubernetes object (no kind)")
        if d.get("kind") == "List":
            out.extend(d.get("items") or [])
        else:
            out.append(d)
    return out


def load_audit(path):
    try:
        text = sys.stdin.read() if path == "-" else open(path, encoding="utf-8").read()
    except OSError as e:
        raise BadInput(f"{path}: cannot read: {e.strerror}")
    try:
        audit = json.loads(text)
    except json.JSONDecodeError as e:
        raise BadInput(f"{path}: not JSON: {e}")
    if not isinstance(audit, dict) or not isinstance(audit.get("requests"), list):
        raise BadInput(f'{path}: expected an object with a "requests" list')
    requests = []
    for i, r in enumerate(audit["requests"]):
        if not isinstance(r, dict):
            raise BadInput(f"{path}: requests[{i}]: not an object")
        for f in AUDIT_FIELDS:
            if not isinstance(r.get(f, ""), str):
                raise BadInput(f"{path}: requests[{i}].{f}: not a string")
        for f in ("user_agent", "verb", "resource"):
            if not r.get(f):
                raise BadInput(f"{path}: requests[{i}].{f}: missing")
        requests.append({f: r.get(f, "") for f in AUDIT_FIELDS})
    dropped = audit.get("dropped", 0)
    if not isinstance(dropped, int) or dropped < 0:
        raise BadInput(f"{path}: dropped: not a count")
    return requests, dropped


def meta(obj, what):
    m = obj.get("metadata")
    if not isinstance(m, dict) or not m.get("name"):
        raise BadInput(f"{what}: {obj.get('kind')} without metadata.name")
    return m


def pod_spec(obj):
    spec = obj.get("spec") or {}
    if obj["kind"] == "Pod":
        return spec
    return ((spec.get("template") or {}).get("spec")) or {}


def program_of(container):
    for field in ("command", "args"):
        argv = container.get(field) or []
        if argv:
            return str(argv[0]).rsplit("/", 1)[-1]
    return container.get("name", "")


def service_accounts(objs, components, explicit, source):
    """component -> (namespace, serviceaccount)."""
    found = {}
    for obj in objs:
        if obj.get("kind") not in WORKLOAD_KINDS:
            continue
        m = meta(obj, source)
        spec = pod_spec(obj)
        sa = spec.get("serviceAccountName") or spec.get("serviceAccount") or "default"
        ns = m.get("namespace", "default")
        for c in (spec.get("containers") or []) + (spec.get("initContainers") or []):
            prog = program_of(c)
            if prog in components and prog not in explicit:
                found.setdefault(prog, (ns, sa))
    found.update(explicit)
    return found


class Rule:
    def __init__(self, role_kind, role_name, index, rule):
        self.where = f"{role_kind} {role_name} rules[{index}]"
        self.groups = list(rule.get("apiGroups") or [])
        self.resources = list(rule.get("resources") or [])
        self.verbs = list(rule.get("verbs") or [])
        self.names = list(rule.get("resourceNames") or [])
        self.role = f"{role_kind} {role_name}"

    def matches(self, req):
        resource = req["resource"] + ("/" + req["subresource"] if req["subresource"] else "")
        if "*" not in self.groups and req["group"] not in self.groups:
            return False
        if "*" not in self.resources and resource not in self.resources:
            return False
        if "*" not in self.verbs and req["verb"] not in self.verbs:
            return False
        if self.names:
            # A create of a new object, and a list or watch of a collection, carry no name to
            # authorize, so a rule with resourceNames never grants them.
            if not req["name"] or req["name"] not in self.names:
                return False
        return True

    def grants(self):
        """Every (verb, group, resource, resourceName or '') this rule grants."""
        for v in self.verbs:
            for g in self.groups:
                for r in self.resources:
                    for n in self.names or [""]:
                        yield (v, g, r, n)

    def has_wildcard(self):
        return "*" in self.groups or "*" in self.resources or "*" in self.verbs


def grants_of(objs, source):
    """(namespace, serviceaccount) -> [(scope namespace or None for everywhere, Rule)], and
    the bindings to roles the manifests do not define."""
    roles = {}
    for obj in objs:
        kind = obj.get("kind")
        if kind in ("Role", "ClusterRole"):
            m = meta(obj, source)
            key = (kind, m.get("namespace", "default") if kind == "Role" else "", m["name"])
            rules = obj.get("rules") or []
            if not isinstance(rules, list):
                raise BadInput(f"{source}: {kind} {m['name']}: rules is not a list")
            roles[key] = [Rule(kind, m["name"], i, r) for i, r in enumerate(rules)]
    grants = collections.defaultdict(list)
    external = []
    for obj in objs:
        kind = obj.get("kind")
        if kind not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        m = meta(obj, source)
        ref = obj.get("roleRef") or {}
        if not ref.get("kind") or not ref.get("name"):
            raise BadInput(f"{source}: {kind} {m['name']}: roleRef needs kind and name")
        ns = m.get("namespace", "default") if kind == "RoleBinding" else None
        if ref["kind"] == "Role":
            if ns is None:
                raise BadInput(f"{source}: ClusterRoleBinding {m['name']} refers to a Role")
            key = ("Role", ns, ref["name"])
        else:
            key = ("ClusterRole", "", ref["name"])
        for s in obj.get("subjects") or []:
            if s.get("kind") != "ServiceAccount":
                continue
            sa = (s.get("namespace") or m.get("namespace") or "default", s.get("name", ""))
            if key not in roles:
                external.append((sa, f"{kind} {m['name']} -> {ref['kind']} {ref['name']}"))
                continue
            for rule in roles[key]:
                grants[sa].append((ns, rule))
    return grants, external


def allowed(req, sa_grants):
    for scope, rule in sa_grants:
        if scope is not None and req["namespace"] != scope:
            continue
        if rule.matches(req):
            return True
    return False


def describe(verb, group, resource, subresource):
    res = resource + ("/" + subresource if subresource else "")
    return f"{verb} {res}" + (f".{group}" if group else "")


def check(objs, requests, components, explicit, source):
    errors, warnings, notes = [], [], []
    sas = service_accounts(objs, components, explicit, source)
    grants, external = grants_of(objs, source)
    by_component = collections.defaultdict(list)
    others = collections.Counter()
    for r in requests:
        if r["user_agent"] in components:
            by_component[r["user_agent"]].append(r)
        else:
            others[r["user_agent"]] += 1

    used = collections.defaultdict(set)  # id(rule) -> granted tuples used
    for comp in components:
        reqs = by_component.get(comp, [])
        if comp not in sas:
            if reqs:
                errors.append(f"{comp}: made {len(reqs)} requests but no workload in the "
                              f"manifests runs it (no container's command is {comp}; use --map)")
            continue
        ns, sa = sas[comp]
        who = f"{comp} (ServiceAccount {ns}/{sa})"
        if not reqs:
            warnings.append(f"{who}: made no requests")
            continue
        missing = collections.OrderedDict()
        for r in reqs:
            if not allowed(r, grants.get((ns, sa), [])):
                key = (r["verb"], r["group"], r["resource"], r["subresource"])
                missing.setdefault(key, []).append(r)
            for scope, rule in grants.get((ns, sa), []):
                if (scope is None or r["namespace"] == scope) and rule.matches(r):
                    res = r["resource"] + ("/" + r["subresource"] if r["subresource"] else "")
                    used[id(rule)].add((r["verb"], r["group"], res, r["name"]))
        for (verb, group, resource, sub), rs in missing.items():
            ex = rs[0]
            where = f"namespace {ex['namespace']}" if ex["namespace"] else "all namespaces or cluster scope"
            name = f", name {ex['name']}" if ex["name"] else ""
            errors.append(f"{who}: {describe(verb, group, resource, sub)} ({len(rs)} requests, "
                          f"e.g. {where}{name}) is not granted by its roles")

    checked = {v for v in sas.values()}
    for sa in sorted(checked):
        for scope, rule in grants.get(sa, []):
            if rule.has_wildcard():
                warnings.append(f"ServiceAccount {sa[0]}/{sa[1]}: {rule.where} has a wildcard "
                                f"(apiGroups {rule.groups}, resources {rule.resources}, "
                                f"verbs {rule.verbs})")
                continue
            seen = used.get(id(rule), set())
            for verb, group, res, name in rule.grants():
                hit = any(u[0] == verb and u[1] == group and u[2] == res and
                          (not name or u[3] == name) for u in seen)
                if not hit:
                    target = res + (f".{group}" if group else "") + (f" {name}" if name else "")
                    warnings.append(f"ServiceAccount {sa[0]}/{sa[1]}: {rule.role} grants "
                                    f"{verb} {target}, which no request used")
    for sa, binding in external:
        if sa in checked:
            notes.append(f"ServiceAccount {sa[0]}/{sa[1]}: {binding} is defined by the cluster, "
                         f"not by these manifests: not counted")
    if others:
        notes.append("requests of other clients, not checked: " +
                     ", ".join(f"{ua} {n}" for ua, n in sorted(others.items())))
    return errors, warnings, notes


def main(argv):
    p = argparse.ArgumentParser(prog="rbac_check.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--manifests", required=True, help="rendered manifests (YAML, '-': stdin)")
    p.add_argument("--audit", required=True, help="GET /sim/audit's JSON ('-': stdin)")
    p.add_argument("--strict", action="store_true", help="unused or wildcard grants are errors")
    p.add_argument("--component", action="append", help="a User-Agent to check (repeatable)")
    p.add_argument("--map", action="append", default=[], metavar="NAME=NAMESPACE/SA",
                   help="the ServiceAccount a component runs as, instead of finding it")
    a = p.parse_args(argv)
    if a.manifests == "-" and a.audit == "-":
        p.error("only one of --manifests and --audit can be standard input")
    components = tuple(a.component) if a.component else DEFAULT_COMPONENTS
    explicit = {}
    for m in a.map:
        name, sep, target = m.partition("=")
        ns, slash, sa = target.partition("/")
        if not sep or not slash or not name or not ns or not sa:
            p.error(f"--map '{m}': expected NAME=NAMESPACE/SERVICEACCOUNT")
        explicit[name] = (ns, sa)
    try:
        objs = load_manifests(a.manifests)
        requests, dropped = load_audit(a.audit)
        errors, warnings, notes = check(objs, requests, components, explicit, a.manifests)
        if dropped:
            # The oldest requests are gone: a grant reported unused may have been used then.
            warnings.insert(0, f"the audit log dropped its {dropped} oldest requests: the "
                               f"check saw only the rest")
    except BadInput as e:
        sys.stderr.write(f"rbac_check: {e}\n")
        return 2
    for n in notes:
        print(f"rbac_check: note: {n}")
    for w in warnings:
        print(f"rbac_check: {'error' if a.strict else 'warning'}: {w}")
    for e in errors:
        print(f"rbac_check: error: {e}")
    failed = bool(errors) or (a.strict and bool(warnings))
    print(f"rbac_check: {'FAIL' if failed else 'ok'}: {len(requests)} requests, "
          f"{len(errors)} errors, {len(warnings)} warnings")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
