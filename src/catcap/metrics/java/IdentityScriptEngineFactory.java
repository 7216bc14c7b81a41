/*
 * Part of catcap. Registers IdentityScriptEngine as "JavaScript" / "javascript" / "js" for
 * javax.script.ScriptEngineManager, which finds factories with java.util.ServiceLoader in
 * META-INF/services/javax.script.ScriptEngineFactory (catcap writes that file into the jar
 * it builds from these sources; see catcap/metrics/spice.py).
 */
package catcap.spice;

import java.util.Arrays;
import java.util.Collections;
import java.util.List;

import javax.script.ScriptEngine;
import javax.script.ScriptEngineFactory;

public final class IdentityScriptEngineFactory implements ScriptEngineFactory {

    private static final List<String> NAMES =
            Collections.unmodifiableList(Arrays.asList("JavaScript", "javascript", "js"));

    @Override
    public String getEngineName() {
        return "catcap identity JSON engine";
    }

    @Override
    public String getEngineVersion() {
        return "1.0";
    }

    @Override
    public List<String> getExtensions() {
        return Collections.emptyList();
    }

    @Override
    public List<String> getMimeTypes() {
        return Collections.emptyList();
    }

    @Override
    public List<String> getNames() {
        return NAMES;
    }

    @Override
    public String getLanguageName() {
        return "ECMAScript (JSON.stringify(JSON.parse(x)) only)";
    }

    @Override
    public String getLanguageVersion() {
        return "1.0";
    }

    @Override
    public Object getParameter(String key) {
        if (ScriptEngine.NAME.equals(key)) {
            return NAMES.get(0);
        } else if (ScriptEngine.ENGINE.equals(key)) {
            return getEngineName();
        } else if (ScriptEngine.ENGINE_VERSION.equals(key)) {
            return getEngineVersion();
        } else if (ScriptEngine.LANGUAGE.equals(key)) {
            return getLanguageName();
        } else if (ScriptEngine.LANGUAGE_VERSION.equals(key)) {
            return getLanguageVersion();
        }
        return null;
    }

    @Override
    public String getMethodCallSyntax(String obj, String method, String... args) {
        return obj + "." + method + "(" + String.join(", ", args) + ")";
    }

    @Override
    public String getOutputStatement(String toDisplay) {
        return "print(" + toDisplay + ")";
    }

    @Override
    public String getProgram(String... statements) {
        return String.join(";\n", statements) + ";";
    }

    @Override
    public ScriptEngine getScriptEngine() {
        return new IdentityScriptEngine(this);
    }
}
