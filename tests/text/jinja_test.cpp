// Jinja semantics, one behaviour per case. Expected strings are what jinja2 (configured as
// transformers configures it) prints; each is small enough to check by hand.
#include <gtest/gtest.h>

#include "shared/core/error.h"
#include "shared/text/jinja_template.h"
#include "shared/text/jinja_value.h"

namespace ft::jinja {
namespace {

std::string render(const std::string& src, const std::string& vars_json = "{}") {
  return Template(src, "t").render(from_json_text(vars_json));
}

struct Case {
  const char* src;
  const char* vars;
  const char* want;
};

TEST(TextJinja, Semantics) {
  const Case cases[] = {
      // whitespace control: trim_blocks, lstrip_blocks, '-' and '+', trailing newline dropped
      {"{% if true %}\nA\n{% endif %}\nB\n", "{}", "A\nB"},
      {"  {% if true %}x{% endif %}  \n", "{}", "x  "},
      {"a  {%- if true -%}  b  {%- endif -%}  c", "{}", "abc"},
      {"  {%+ if true %}x{% endif %}", "{}", "  x"},
      {"{{ 'a' }}\n{{ 'b' }}", "{}", "a\nb"},
      {"x {# note #}\ny", "{}", "x y"},
      {"    {# c #}\nz", "{}", "z"},
      {"{% raw %}{{ not parsed }}{% endraw %}", "{}", "{{ not parsed }}"},
      // literals and printing as Python str()
      {"{{ none }}|{{ true }}|{{ 1.0 }}|{{ 1e20 }}|{{ 0.1 + 0.2 }}|{{ [1, 'a', none] }}|{{ {'k': (1,)} }}", "{}",
       "None|True|1.0|1e+20|0.30000000000000004|[1, 'a', None]|{'k': (1,)}"},
      {"{{ \"it's\" }}|{{ ['it\\'s'] }}|{{ 7 // 2 }}|{{ -7 // 2 }}|{{ -7 % 3 }}|{{ 7 / 2 }}|{{ 2 ** 10 }}", "{}",
       "it's|[\"it's\"]|3|-4|2|3.5|1024"},
      {"{{ 'a' ~ 1 ~ none ~ undefined_thing }}", "{}", "a1None"},
      {"{{ x }}|{{ x is defined }}|{{ x|default('d') }}|{{ x|length }}|{% for i in x %}never{% endfor %}", "{}", "|False|d|0|"},
      // tests and precedence
      {"{{ 1 is odd }} {{ 'a' is string }} {{ {} is mapping }} {{ 'ab' is iterable }} {{ none is none }} "
       "{{ 3 is divisibleby 3 }} {{ x is not defined and 1 }}",
       "{}", "True True True True True True 1"},
      {"{{ -2|abs }} {{ 'x' if 0 else 'y' }} {{ 1 < 2 < 3 }} {{ 'b' in 'abc' }} {{ 2 not in [1] }}", "{}",
       "2 y True True True"},
      {"{{ (1 + 2) * 3 ~ 4 }}|{{ 'a' ~ 2 * 3 }}", "{}", "94|a6"},  // '~' binds looser than '*', tighter than '+'
      // loops
      {"{% for x in 'abc' %}{{ loop.index }}{{ x }}{{ ',' if not loop.last }}{% endfor %}", "{}", "1a,2b,3c"},
      {"{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", R"({"d":{"z":1,"a":2}})", "z=1;a=2;"},
      {"{% for x in [1,2,3,4] if x is even %}{{ x }}{{ loop.length }}{% else %}none{% endfor %}", "{}", "2242"},
      {"{% for x in [] %}x{% else %}empty{% endfor %}", "{}", "empty"},
      {"{% for x in [1,2,3] %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 3 %}{% break %}{% endif %}{{ x }}"
       "{% endfor %}",
       "{}", "1"},
      {"{% for x in [1,2] %}{{ loop.previtem is defined }}{{ loop.nextitem }}{{ loop.cycle('a','b') }}{% endfor %}", "{}",
       "False2aTrueb"},
      // scoping: a set inside a loop neither leaks nor survives the iteration; namespace does
      {"{% set x = 1 %}{% for i in [1,2] %}{{ x }}{% set x = 5 %}{{ x }}{% endfor %}{{ x }}", "{}", "15151"},
      {"{% set ns = namespace(n=0) %}{% for i in [1,2,3] %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}", "{}", "6"},
      {"{% for i in [1] %}{% if true %}{% set y = 'in' %}{% endif %}{{ y }}{% endfor %}[{{ y }}]", "{}", "in[]"},
      // macros: defaults, keyword arguments, lexical scope, caller
      {"{% macro m(a, b='B') %}{{ a }}{{ b }}{{ g }}{% endmacro %}{% set g = 'G' %}{{ m(1) }}{{ m(1, b=2) }}", "{}",
       "1BG12G"},
      {"{% macro m() %}{{ loopvar }}{% endmacro %}{% for loopvar in [1] %}[{{ m() }}]{% endfor %}", "{}", "[]"},
      {"{% macro w() %}<{{ caller() }}>{% endmacro %}{% call w() %}in{% endcall %}", "{}", "<in>"},
      {"{% set b %}x{{ 1 }}{% endset %}{{ b }}{% filter upper %}abc{% endfilter %}", "{}", "x1ABC"},
      // strings
      {"{{ ' a b '.strip() }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'xxhixx'.strip('x') }}|"
       "{{ 'Hello'.startswith(('x', 'He')) }}|{{ 'abc'[::-1] }}|{{ 'héllo'[1:3] }}|{{ 'a-b-c'.rsplit('-', 1) }}",
       "{}", "a b|['a', 'b', '', 'c']|['a', 'b']|hi|True|cba|él|['a-b', 'c']"},
      {"{{ 'max'|capitalize }} {{ 'hello world'|title }} {{ 'ab'|upper }} {{ '  t  '|trim }} {{ 'aXbX'|replace('X', '-') }}"
       " {{ '{}+{}'.format(1, 'b') }} {{ 'x%sy' % 5 }}",
       "{}", "Max Hello World AB t a-b- 1+b x5y"},
      // lists and filters
      {"{{ [3,1,2]|sort }} {{ [1,2,3]|join('-') }} {{ [1,2,3][-1] }} {{ [1,2,3][1:] }} {{ range(3)|list }} "
       "{{ range(1, 7, 2)|list }} {{ [1,2,3]|first }}{{ [1,2,3]|last }} {{ [1,2]|reverse|list }} {{ [1,1,2]|unique|list }}",
       "{}", "[1, 2, 3] 1-2-3 3 [2, 3] [0, 1, 2] [1, 3, 5] 13 [2, 1] [1, 2]"},
      {"{{ users|map(attribute='name')|join(',') }} {{ users|selectattr('admin')|map(attribute='name')|list }} "
       "{{ users|rejectattr('name', 'equalto', 'a')|list|length }} {{ [1,2,3]|select('odd')|list }} {{ [1,2]|sum }}",
       R"({"users":[{"name":"a","admin":true},{"name":"b","admin":false}]})", "a,b ['a'] 1 [1, 3] 3"},
      {"{{ d|dictsort }} {{ d['k'] }} {{ d.k }} {{ d.get('zz', 'dflt') }} {{ 'k' in d }} {{ d.missing is defined }}",
       R"({"d":{"k":1,"b":2}})", "[('b', 2), ('k', 1)] 1 1 dflt True False"},
      // tojson = json.dumps(ensure_ascii=False), key order kept
      {"{{ v|tojson }}", R"({"v":{"b":[1,2.5,true,null],"a":"é\"\n","c":{}}})",
       "{\"b\": [1, 2.5, true, null], \"a\": \"é\\\"\\n\", \"c\": {}}"},
      {"{{ v|tojson(indent=2) }}", R"({"v":{"a":[1,{"b":[]}]}})", "{\n  \"a\": [\n    1,\n    {\n      \"b\": []\n    }\n  ]\n}"},
      {"{{ v|tojson(ensure_ascii=True) }}|{{ v|tojson(separators=(',', ':')) }}|{{ {'b':1,'a':2}|tojson(sort_keys=true) }}",
       R"({"v":["é🙂",1]})", "[\"\\u00e9\\ud83d\\ude42\", 1]|[\"é🙂\",1]|{\"a\": 2, \"b\": 1}"},
      // message-content idioms of chat templates
      {"{{ m.content.0.type }}|{{ 'x'.0 }}|{{ m.content[0]['text'] }}|{{ (m.content|selectattr('type','equalto','text')|first).text }}",
       R"({"m":{"content":[{"type":"text","text":"T"}]}})", "text|x|T|T"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.src);
    std::string got;
    try {
      got = render(c.src, c.vars);
    } catch (const Error& e) {
      ADD_FAILURE() << e.what();
      continue;
    }
    EXPECT_EQ(got, c.want);
  }
}

TEST(TextJinja, ErrorsAreClearAndCarryTheLine) {
  struct Bad {
    const char* src;
    const char* needle;
  };
  const Bad bad[] = {
      {"a\n{{ x.y }}", "line 2: 'x' is undefined"},
      {"{{ 1 + 'a' }}", "unsupported operand"},
      {"{{ 'a' + 1 }}", "can only concatenate str"},
      {"{{ [1].append(2) }}", "unsafe"},
      {"{% for %}", "syntax error"},
      {"{{ 1 +* 2 }}", "syntax error"},
      {"{% endfor %}", "syntax error"},
      {"{% set ns2 = 1 %}{% set ns2.a = 1 %}", "non-namespace"},
      {"{{ raise_exception('boom') }}", "boom"},
      {"{{ x|nosuchfilter }}", "no filter named 'nosuchfilter'"},
      {"{{ none|tojson }}{{ undefined_name|tojson }}", "not JSON serializable"},
      {"{% macro r() %}{{ r() }}{% endmacro %}{{ r() }}", "recursion"},
  };
  for (const Bad& b : bad) {
    SCOPED_TRACE(b.src);
    try {
      render(b.src);
      ADD_FAILURE() << "expected an error";
    } catch (const TemplateError& e) {
      EXPECT_NE(std::string(e.what()).find(b.needle), std::string::npos) << e.what();
    }
  }
}

TEST(TextJinja, PythonFloatRepr) {
  EXPECT_EQ(py_float_repr(0.1), "0.1");
  EXPECT_EQ(py_float_repr(100.0), "100.0");
  EXPECT_EQ(py_float_repr(1e16), "1e+16");
  EXPECT_EQ(py_float_repr(1234567890123456.0), "1234567890123456.0");
  EXPECT_EQ(py_float_repr(0.0001), "0.0001");
  EXPECT_EQ(py_float_repr(0.00001), "1e-05");
  EXPECT_EQ(py_float_repr(-2.5e-7), "-2.5e-07");
  EXPECT_EQ(py_float_repr(-0.0), "-0.0");
}

}  // namespace
}  // namespace ft::jinja
