/*
 * Part of catcap. A stand-in for the "JavaScript" script engine, for SPICE 1.0 on Java >= 15.
 *
 * SPICE 1.0 (edu.anu.spice.SpiceScorer.scoreBatch) uses a script engine only to pretty-print
 * the JSON it writes with -out:
 *
 *     ScriptEngine engine = new ScriptEngineManager().getEngineByName("JavaScript");
 *     engine.put("jsonString", jsonStringNoWhitespace);
 *     engine.eval("result = JSON.stringify(JSON.parse(jsonString), null, 2)");
 *     String prettyPrintedJson = (String) engine.get("result");
 *
 * Nashorn, the JavaScript engine Java 8-14 ship, was removed in Java 15, so getEngineByName
 * returns null there and SPICE fails with a NullPointerException after all its work.
 * This engine runs exactly that kind of statement, `target = JSON.stringify(JSON.parse(source), ...)`
 * (or the bare expression), by binding `target` to the value of `source` unchanged: compact
 * JSON is still the same JSON. Any other script is refused with a ScriptException.
 * IdentityScriptEngineFactory registers it (as a java.util.ServiceLoader service) under the
 * names "JavaScript", "javascript" and "js".
 */
package catcap.spice;

import java.io.IOException;
import java.io.Reader;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import javax.script.AbstractScriptEngine;
import javax.script.Bindings;
import javax.script.ScriptContext;
import javax.script.ScriptEngineFactory;
import javax.script.ScriptException;
import javax.script.SimpleBindings;

public final class IdentityScriptEngine extends AbstractScriptEngine {

    private static final String NAME = "[A-Za-z_$][A-Za-z0-9_$]*";
    private static final Pattern REFORMAT = Pattern.compile(
            "\\s*(?:(?:var\\s+|let\\s+|const\\s+)?(" + NAME + ")\\s*=\\s*)?"
            + "JSON\\s*\\.\\s*stringify\\s*\\(\\s*JSON\\s*\\.\\s*parse\\s*\\(\\s*(" + NAME + ")\\s*\\)"
            + "\\s*(?:,[^;()]*)?\\)\\s*;?\\s*");

    private final ScriptEngineFactory factory;

    public IdentityScriptEngine() {
        this(new IdentityScriptEngineFactory());
    }

    public IdentityScriptEngine(ScriptEngineFactory factory) {
        this.factory = factory;
    }

    @Override
    public Object eval(String script, ScriptContext context) throws ScriptException {
        Matcher match = REFORMAT.matcher(script);
        if (!match.matches()) {
            throw new ScriptException("catcap's identity engine only runs "
                    + "`x = JSON.stringify(JSON.parse(y), ...)`, not: " + script);
        }
        String source = match.group(2);
        if (context.getAttributesScope(source) == -1) {
            throw new ScriptException("ReferenceError: \"" + source + "\" is not defined");
        }
        Object value = context.getAttribute(source);
        if (match.group(1) != null) {
            context.setAttribute(match.group(1), value, ScriptContext.ENGINE_SCOPE);
        }
        return value;
    }

    @Override
    public Object eval(Reader reader, ScriptContext context) throws ScriptException {
        StringBuilder script = new StringBuilder();
        char[] buffer = new char[4096];
        try {
            for (int n = reader.read(buffer); n != -1; n = reader.read(buffer)) {
                script.append(buffer, 0, n);
            }
        } catch (IOException err) {
            throw new ScriptException(err);
        }
        return eval(script.toString(), context);
    }

    @Override
    public Bindings createBindings() {
        return new SimpleBindings();
    }

    @Override
    public ScriptEngineFactory getFactory() {
        return factory;
    }
}
